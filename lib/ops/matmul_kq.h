/* matmul_kq.h: the products of the GGUF block types (Q5_0, Q5_1, Q2_K ..
 * Q8_K, IQ4_NL, IQ4_XS; quant/kquants.h) with int16 activations, included
 * by matmul_simd.h (so once per ISA; SIMD(name) and DOT16 come from there).
 * Not a public header.
 *
 * A row is read a chunk of 256 elements at a time (one super-block, or up
 * to eight 32-element blocks), unpacked into the canonical form: int16
 * codes c, and per 16 or 32 elements a float scale s and minimum m. Per
 * 32-element activation block (x ~ dx * q, struct llm_qx16) the integer
 * dot of c with q is exact (|c| <= 128, |q| <= 32767), then meets the
 * scales in float.
 *
 * Every type runs the int16 GEMM of matmul_gemm.h, for decode and prefill
 * alike (kq_pack, kq_decode_rows): Q6_K with a float step per half block
 * there (gq_s16), Q2_K with its minimums per 16 from the token's half-block
 * sums (gq_q2); Q3_K and Q2_K fold their integer sub-scales into the codes.
 * Decode follows the GEMM's float order, so llm_matmul gives llm_matvec's
 * bits for every token (batch invariance, matmul_impl.h).
 */

/* the codes, scales and minimums of one chunk: s and m per 32-element
 * block (b) for the types whose scales cover 32, per 16 (g) for Q3_K and
 * Q6_K; sc3: Q3_K's and Q2_K's integer sub-scales, for the GEMM's folding.
 * Q2_K: s = d for every block, m per 16 its integer minimums (as floats),
 * dm = -dmin (SIMD(q2min)). */
struct SIMD(kq_chunk) {
    int16_t c[256] __attribute__((aligned(32)));
    float s[16], m[16];
    int16_t sc3[16] __attribute__((aligned(32)));
    float dm;
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

/* 8 bytes (little-endian in u) times d, as 8 floats at out (neg: negated) */
SIMD_INLINE void SIMD(kq_scale8)(uint64_t u, float d, int neg, float *out)
{
    __m256 v = _mm256_mul_ps(_mm256_set1_ps(d),
                             _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)u))));
    if (neg)
        v = _mm256_xor_ps(v, _mm256_set1_ps(-0.0f));
    _mm256_storeu_ps(out, v);
}

/* A Q4_K/Q5_K block's eight sub-block scales d*sc (s) and minimums
 * -(dmin*mn) (m): the 6-bit fields (formats.md §1.6) unpacked a word at a
 * time */
SIMD_INLINE void SIMD(kq_scales_k4)(const uint8_t *b, float *s, float *m)
{
    uint32_t u[3];
    memcpy(u, b + 4, 12);
    const uint64_t sc = (u[0] & 0x3f3f3f3fu) |
                        (uint64_t)((u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4) << 32;
    const uint64_t mn = (u[1] & 0x3f3f3f3fu) |
                        (uint64_t)(((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4) << 32;
    SIMD(kq_scale8)(sc, SIMD(ldh)(b), 0, s);
    SIMD(kq_scale8)(mn, SIMD(ldh)(b + 2), 1, m);
}

/* A Q3_K block's sixteen 6-bit sub-scales (12 bytes at sc, formats.md
 * §1.6) minus 32, as int8: the low nibbles of bytes 0-7 then their high
 * ones, each with two bits of bytes 8-11 on top, a word at a time */
SIMD_INLINE __m128i SIMD(kq_scales_k3)(const uint8_t *sc)
{
    uint64_t a;
    uint32_t h;
    memcpy(&a, sc, 8);
    memcpy(&h, sc + 8, 4);
    const uint64_t m4 = 0x0f0f0f0f0f0f0f0full;
    const uint32_t m2 = 0x03030303u;
    const uint64_t lo = (a & m4) | ((uint64_t)(h & m2) | (uint64_t)((h >> 2) & m2) << 32) << 4;
    const uint64_t hi = ((a >> 4) & m4) | ((uint64_t)((h >> 4) & m2) | (uint64_t)((h >> 6) & m2) << 32) << 4;
    return _mm_sub_epi8(_mm_set_epi64x((long long)hi, (long long)lo), _mm_set1_epi8(32));
}

/* An IQ4_XS block's eight scales d (ls - 32) into s: nibble j of the word
 * at 4 with bits 2j, 2j + 1 of the one at 2 on top (formats.md), spread to
 * byte j a word at a time */
SIMD_INLINE void SIMD(kq_scales_xs)(const uint8_t *b, float *s)
{
    uint32_t l;
    uint16_t h;
    memcpy(&l, b + 4, 4);
    memcpy(&h, b + 2, 2);
    uint64_t lo = l, hi = h;
    lo = (lo | lo << 16) & 0x0000FFFF0000FFFFull;
    lo = (lo | lo << 8) & 0x00FF00FF00FF00FFull;
    lo = (lo | lo << 4) & 0x0F0F0F0F0F0F0F0Full;
    hi = (hi | hi << 24) & 0x000000FF000000FFull;
    hi = (hi | hi << 12) & 0x000F000F000F000Full;
    hi = (hi | hi << 6) & 0x0303030303030303ull;
    const __m256i ls = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)(lo | hi << 4)));
    _mm256_storeu_ps(s, _mm256_mul_ps(_mm256_set1_ps(SIMD(ldh)(b)),
                                      _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)))));
}

/* A Q2_K block's 16 integer minimums (the high nibbles of its 16 scale
 * bytes at b) as floats into m, and -dmin into *dm */
SIMD_INLINE void SIMD(kq_mins_k2)(const uint8_t *b, float *m, float *dm)
{
    const __m128i sc = _mm_loadu_si128((const __m128i *)b);
    const __m128i mn = _mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F));
    _mm256_storeu_ps(m, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn)));
    _mm256_storeu_ps(m + 8, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(mn, 8))));
    *dm = -SIMD(ldh)(b + 82);
}

/* Block q's scale s and minimum at lane i of the GEMM's D and M (nq, 16):
 * m[0]; Q2_K (q2): M (nq, 3, 16) gets its halves' minimums m[0], m[1] and
 * dm (SIMD(q2min)) */
SIMD_INLINE void SIMD(kq_put)(float *D, float *M, int64_t q, int i, float s, const float *m, float dm,
                              int q2)
{
    D[q * 16 + i] = s;
    if (!q2) {
        M[q * 16 + i] = m[0];
        return;
    }
    M[3 * q * 16 + i] = m[0];
    M[(3 * q + 1) * 16 + i] = m[1];
    M[(3 * q + 2) * 16 + i] = dm;
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

/* the binary16 at each of n (<= 8) blocks of BB bytes from p (plus off), as
 * floats at out; gathered in general registers (eight 2-byte stores read
 * back as one vector would stall the store forwarding) */
SIMD_INLINE void SIMD(kq_halves)(const uint8_t *p, int BB, int off, int n, float *out)
{
    uint64_t w0 = 0, w1 = 0;
    for (int j = 0; j < n && j < 4; j++) {
        uint16_t h;
        memcpy(&h, p + j * BB + off, 2);
        w0 |= (uint64_t)h << (16 * j);
    }
    for (int j = 4; j < n; j++) {
        uint16_t h;
        memcpy(&h, p + j * BB + off, 2);
        w1 |= (uint64_t)h << (16 * (j - 4));
    }
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_set_epi64x((long long)w1, (long long)w0)));
}

/* Chunk [e0, e0 + n) of a row of type t in canonical form (n = 256, or
 * for the 32-element types a multiple of 32 up to 256). */
static void SIMD(kq_unpack)(enum llm_type t, const uint8_t *row, int64_t e0, int n,
                            struct SIMD(kq_chunk) *k)
{
    const __m256i f = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    switch (t) {
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K: {
        const int five = t == LLM_TYPE_Q5_K;
        const uint8_t *b = row + e0 / 256 * (five ? 176 : 144);
        SIMD(kq_scales_k4)(b, k->s, k->m);
        const uint8_t *ql = b + (five ? 48 : 16);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
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
        const __m256 d = _mm256_set1_ps(SIMD(ldh)(b + 208));
        const __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
        _mm256_storeu_ps(k->s, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
        _mm256_storeu_ps(k->s + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
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
    case LLM_TYPE_Q2_K:
    case LLM_TYPE_Q3_K: {
        /* element 128 n + 32 j + l: bits 2j of qs[32 n + l]; Q3_K: minus 4
         * unless bit 4n + j of hmask[l] */
        const int q3 = t == LLM_TYPE_Q3_K;
        const uint8_t *b = row + e0 / 256 * (q3 ? 110 : 84);
        const uint8_t *qs = b + (q3 ? 32 : 16);
        const __m256i hm = q3 ? _mm256_loadu_si256((const __m256i *)b) : _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three);
                if (q3)
                    v = _mm256_sub_epi8(_mm256_add_epi8(v, _mm256_slli_epi16(
                            _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one), 2)),
                        _mm256_set1_epi8(4));
                SIMD(kq_st32)(k->c + 128 * h + 32 * j, v, q3);
            }
        }
        if (q3) {
            const __m256i sc = _mm256_cvtepi8_epi16(SIMD(kq_scales_k3)(b + 96));
            const __m256 d = _mm256_set1_ps(SIMD(ldh)(b + 108));
            _mm256_store_si256((__m256i *)k->sc3, sc);
            const __m128i s0 = _mm256_castsi256_si128(sc), s1 = _mm256_extracti128_si256(sc, 1);
            _mm256_storeu_ps(k->s, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(s0))));
            _mm256_storeu_ps(k->s + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(s1))));
            memset(k->m, 0, sizeof k->m);
        } else { /* Q2_K: byte g of the 16 at b, scale low nibble, minimum high */
            const __m128i lo4 = _mm_and_si128(_mm_loadu_si128((const __m128i *)b), _mm_set1_epi8(0x0F));
            _mm256_store_si256((__m256i *)k->sc3, _mm256_cvtepu8_epi16(lo4));
            SIMD(kq_mins_k2)(b, k->m, &k->dm);
            const __m256 d = _mm256_set1_ps(SIMD(ldh)(b + 80));
            _mm256_storeu_ps(k->s, d);
            _mm256_storeu_ps(k->s + 8, d);
        }
        return;
    }
    case LLM_TYPE_Q5_0:
    case LLM_TYPE_Q5_1: {
        const int zp = t == LLM_TYPE_Q5_1, BB = zp ? 24 : 22;
        const uint8_t *b0 = row + e0 / 32 * BB;
        for (int j = 0; j < n / 32; j++) {
            const uint8_t *b = b0 + j * BB;
            __m256i v = _mm256_or_si256(SIMD(kq_nib32)(b + (zp ? 8 : 6)), SIMD(kq_bits)(b + (zp ? 4 : 2), 0x10));
            if (!zp)
                v = _mm256_sub_epi8(v, _mm256_set1_epi8(16));
            SIMD(kq_st32)(k->c + 32 * j, v, !zp);
        }
        SIMD(kq_halves)(b0, BB, 0, n / 32, k->s);
        if (zp)
            SIMD(kq_halves)(b0, BB, 2, n / 32, k->m);
        else
            _mm256_storeu_ps(k->m, _mm256_setzero_ps());
        return;
    }
    case LLM_TYPE_IQ4_NL:
    case LLM_TYPE_IQ4_XS: {
        static const int8_t kv[16] = LLM_IQ4NL_VALUES;
        const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kv));
        _mm256_storeu_ps(k->m, _mm256_setzero_ps());
        if (t == LLM_TYPE_IQ4_NL) {
            const uint8_t *b0 = row + e0 / 32 * 18;
            for (int j = 0; j < n / 32; j++)
                SIMD(kq_st32)(k->c + 32 * j, _mm256_shuffle_epi8(lut, SIMD(kq_nib32)(b0 + 18 * j + 2)), 1);
            SIMD(kq_halves)(b0, 18, 0, n / 32, k->s);
            return;
        }
        const uint8_t *b = row + e0 / 256 * 136;
        SIMD(kq_scales_xs)(b, k->s);
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
        const __m256 d = _mm256_set1_ps(SIMD(ldf)(b));
        _mm256_storeu_ps(k->s, d);
        _mm256_storeu_ps(k->m, _mm256_setzero_ps());
        for (int p = 0; p < 8; p++)
            SIMD(kq_st32)(k->c + 32 * p, _mm256_loadu_si256((const __m256i *)(b + 4 + 32 * p)), 1);
        return;
    }
    default:
        return;
    }
}

/* 8 int32 lanes: i plus lanes that sum to sum_j a[j]*b[j] (16 int16 each) */
#ifdef SIMD_AVX512
#define KQ_DOT(i, a, b) _mm256_dpwssd_epi32((i), (a), (b))
#else
#define KQ_DOT(i, a, b) _mm256_add_epi32((i), _mm256_madd_epi16((a), (b)))
#endif

/* A chunk in the GEMM's form: the canonical one, except that Q3_K's 6-bit
 * and Q2_K's 4-bit sub-scales are folded into their codes (|c sc| <= 128,
 * 45) and s is then the super-block's d for every 32 elements. */
SIMD_INLINE void SIMD(kq_unpack_gemm)(enum llm_type t, const uint8_t *row, int64_t e0, int n,
                                      struct SIMD(kq_chunk) *k)
{
    SIMD(kq_unpack)(t, row, e0, n, k);
    if (t != LLM_TYPE_Q3_K && t != LLM_TYPE_Q2_K)
        return;
    for (int g = 0; g < 16; g++) {
        const __m256i v = _mm256_load_si256((const __m256i *)(k->c + 16 * g));
        _mm256_store_si256((__m256i *)(k->c + 16 * g), _mm256_mullo_epi16(v, _mm256_set1_epi16(k->sc3[g])));
    }
    if (t == LLM_TYPE_Q3_K) { /* per 32 elements (b) now, as the other GEMM types */
        const __m256 d = _mm256_set1_ps(SIMD(ldh)(row + e0 / 256 * 110 + 108));
        _mm256_storeu_ps(k->s, d);
        _mm256_storeu_ps(k->s + 8, d);
    }
}

/* matmul_gemm.h's packing (SIMD(gq_pack_rows)) for these types: rows
 * [r, r + nr) (nr <= 16; missing rows are zero) into P (nq, 16 pairs, 16
 * lanes) int32, D and M (nq, 16): each 32-element block's int16 codes and
 * its float scale and minimum, from the canonical form (SIMD(gq_s16): D
 * (nq, 2, 16), a scale per half block; SIMD(gq_q2): M (nq, 3, 16), the
 * halves' minimums and -dmin). */
static void SIMD(kq_pack)(enum llm_type t, const uint8_t *W, uint64_t rb, int64_t r, int nr,
                          int64_t ne0, int64_t nq, int32_t *P, float *D, float *M)
{
    const int s16 = SIMD(gq_s16)(t), q2 = SIMD(gq_q2)(t), nm = q2 ? 3 : 1;
    struct SIMD(kq_chunk) k;
    for (int i = 0; i < 16; i++) {
        if (i >= nr) {
            for (int64_t q = 0; q < nq; q++)
                memset(P + q * 256 + i * 16, 0, 16 * sizeof(int32_t));
            for (int64_t q = 0; q < nq * nm; q++)
                M[q * 16 + i] = 0.0f;
            for (int64_t q = 0; q < nq << s16; q++)
                D[q * 16 + i] = 0.0f;
            continue;
        }
        const uint8_t *row = W + (uint64_t)(r + i) * rb;
        for (int64_t e0 = 0; e0 < ne0; e0 += 256) {
            const int n = ne0 - e0 < 256 ? (int)(ne0 - e0) : 256;
            SIMD(kq_unpack_gemm)(t, row, e0, n, &k);
            for (int b = 0; b < n / 32; b++) {
                const int64_t q = e0 / 32 + b;
                _mm256_storeu_si256((__m256i *)(P + q * 256 + i * 16),
                                    _mm256_load_si256((const __m256i *)(k.c + 32 * b)));
                _mm256_storeu_si256((__m256i *)(P + q * 256 + i * 16 + 8),
                                    _mm256_load_si256((const __m256i *)(k.c + 32 * b + 16)));
                if (s16) { /* D (nq, 2, 16): each half's scale */
                    D[2 * q * 16 + i] = k.s[2 * b];
                    D[(2 * q + 1) * 16 + i] = k.s[2 * b + 1];
                    M[q * 16 + i] = 0.0f;
                    continue;
                }
                SIMD(kq_put)(D, M, q, i, k.s[b], k.m + (b << q2), q2 ? k.dm : 0.0f, q2);
            }
        }
    }
    for (int64_t q = 0; q < nq; q++)
        SIMD(gq_tr16)(P + q * 256);
}

#ifdef SIMD_AVX512
/* AVX-512 decode without the canonical form in memory: the exact int32
 * dots of a chunk's blocks with the token (v, 8 lanes each) and their
 * scales and minimums (s, m per block), for the common types; 0 for the
 * others. The codes are those of kq_unpack, so the sums are the same. */
SIMD_INLINE __m256i SIMD(kq_dot512)(__m512i c, const struct llm_qx16 *x)
{
    const __m512i d = _mm512_dpwssd_epi32(_mm512_setzero_si512(), c, _mm512_loadu_si512((const void *)x->qs));
    return _mm256_add_epi32(_mm512_castsi512_si256(d), _mm512_extracti64x4_epi64(d, 1));
}

static int SIMD(kq_dots)(enum llm_type t, const uint8_t *row, int64_t e0, int n,
                         const struct llm_qx16 *x, __m256i *v, float *s, float *m)
{
    const __m512i f16 = _mm512_set1_epi16(0x0F);
    switch (t) {
    case LLM_TYPE_Q5_0:
    case LLM_TYPE_Q5_1:
    case LLM_TYPE_IQ4_NL: {
        const int BB = t == LLM_TYPE_Q5_0 ? 22 : t == LLM_TYPE_Q5_1 ? 24 : 18;
        const int qo = t == LLM_TYPE_Q5_0 ? 6 : t == LLM_TYPE_Q5_1 ? 8 : 2;
        const uint8_t *b0 = row + e0 / 32 * BB;
        static const int8_t kv[16] = LLM_IQ4NL_VALUES;
        const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kv));
        for (int j = 0; j < n / 32; j++) {
            const uint8_t *b = b0 + j * BB;
            /* 16 bytes: elements 0-15 in the low nibbles, 16-31 in the high */
            const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b + qo)));
            __m512i c;
            if (t == LLM_TYPE_IQ4_NL) {
                const __m128i lo = _mm256_cvtepi16_epi8(_mm256_and_si256(w, _mm256_set1_epi16(0x0F)));
                const __m128i hi = _mm256_cvtepi16_epi8(_mm256_srli_epi16(w, 4));
                c = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(lut, _mm256_set_m128i(hi, lo)));
            } else {
                uint32_t qh;
                memcpy(&qh, b + qo - 4, 4);
                c = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(w, _mm256_set1_epi16(0x0F))),
                                       _mm256_srli_epi16(w, 4), 1);
                c = _mm512_mask_add_epi16(c, (__mmask32)qh, c, _mm512_set1_epi16(0x10));
                if (t == LLM_TYPE_Q5_0)
                    c = _mm512_sub_epi16(c, _mm512_set1_epi16(16));
            }
            v[j] = SIMD(kq_dot512)(c, x + j);
        }
        SIMD(kq_halves)(b0, BB, 0, n / 32, s);
        if (t == LLM_TYPE_Q5_1)
            SIMD(kq_halves)(b0, BB, 2, n / 32, m);
        else
            _mm256_storeu_ps(m, _mm256_setzero_ps());
        return 1;
    }
    case LLM_TYPE_Q4_K:
    case LLM_TYPE_Q5_K: {
        const int five = t == LLM_TYPE_Q5_K;
        const uint8_t *b = row + e0 / 256 * (five ? 176 : 144);
        SIMD(kq_scales_k4)(b, s, m);
        const uint8_t *ql = b + (five ? 48 : 16);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) {
            const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(ql + 32 * p)));
            __m512i lo = _mm512_and_si512(w, f16), hi = _mm512_srli_epi16(w, 4);
            if (five) { /* bit k of qh[l]: lane l of sub-block k, as a mask */
                const __mmask32 k0 = (__mmask32)_mm256_movemask_epi8(_mm256_slli_epi16(qh, 7 - 2 * p));
                const __mmask32 k1 = (__mmask32)_mm256_movemask_epi8(_mm256_slli_epi16(qh, 6 - 2 * p));
                lo = _mm512_mask_add_epi16(lo, k0, lo, _mm512_set1_epi16(0x10));
                hi = _mm512_mask_add_epi16(hi, k1, hi, _mm512_set1_epi16(0x10));
            }
            v[2 * p] = SIMD(kq_dot512)(lo, x + 2 * p);
            v[2 * p + 1] = SIMD(kq_dot512)(hi, x + 2 * p + 1);
        }
        return 1;
    }
    case LLM_TYPE_IQ4_XS: {
        /* sub-block j: 16 bytes at b + 8 + 16 j, its elements 0-15 in the
         * low nibbles and 16-31 in the high ones (kq_unpack's order), scale
         * d (ls - 32) */
        static const int8_t kv[16] = LLM_IQ4NL_VALUES;
        /* the 16 values as int16, looked up by vpermw */
        const __m512i lut =
            _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)kv)));
        const uint8_t *b = row + e0 / 256 * 136;
        for (int j = 0; j < 8; j += 2) {
            /* sub-blocks j, j + 1: lo (hi) holds elements 0-15 (16-31) of
             * each, as 128-bit lanes 0-1 and 2-3 */
            const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(b + 8 + 16 * j)));
            const __m512i lo = _mm512_permutexvar_epi16(_mm512_and_si512(w, f16), lut);
            const __m512i hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), lut);
            v[j] = SIMD(kq_dot512)(_mm512_shuffle_i64x2(lo, hi, 0x44), x + j);
            v[j + 1] = SIMD(kq_dot512)(_mm512_shuffle_i64x2(lo, hi, 0xEE), x + j + 1);
        }
        SIMD(kq_scales_xs)(b, s);
        _mm256_storeu_ps(m, _mm256_setzero_ps());
        return 1;
    }
    case LLM_TYPE_Q2_K:
    case LLM_TYPE_Q3_K: {
        /* the GEMM's form (kq_unpack_gemm): the codes times their
         * sub-scales (|c sc| <= 128), s = d; block 4h + j is bits 2j of
         * qs[32 h + l], for Q3_K minus 4 unless bit 4h + j of hmask[l]
         * (Q2_K's minimums: kq_decode_rows) */
        const int q3 = t == LLM_TYPE_Q3_K;
        const uint8_t *b = row + e0 / 256 * (q3 ? 110 : 84);
        const __m256i hm = q3 ? _mm256_loadu_si256((const __m256i *)b) : _mm256_setzero_si256();
        const __m128i sc8 = q3 ? SIMD(kq_scales_k3)(b + 96)
                               : _mm_and_si128(_mm_loadu_si128((const __m128i *)b), _mm_set1_epi8(0x0F));
        const __m512i sc = _mm512_castsi256_si512(q3 ? _mm256_cvtepi8_epi16(sc8) : _mm256_cvtepu8_epi16(sc8));
        /* lanes 0-15: sub-scale 0, lanes 16-31: sub-scale 1 (plus 2 per block) */
        const __m512i half = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);
        const __m512i three = _mm512_set1_epi16(3), four = _mm512_set1_epi16(4);
        for (int h = 0; h < 2; h++) {
            const __m256i qs = _mm256_loadu_si256((const __m256i *)(b + (q3 ? 32 : 16) + 32 * h));
            const __m512i w = _mm512_cvtepu8_epi16(qs);
            for (int j = 0; j < 4; j++) {
                const int blk = 4 * h + j;
                __m512i c = _mm512_and_si512(_mm512_srli_epi16(w, 2 * j), three);
                if (q3) {
                    const __mmask32 hi = (__mmask32)_mm256_movemask_epi8(_mm256_slli_epi16(hm, 7 - blk));
                    c = _mm512_sub_epi16(c, four);
                    c = _mm512_mask_add_epi16(c, hi, c, four);
                }
                const __m512i s2 =
                    _mm512_permutexvar_epi16(_mm512_add_epi16(half, _mm512_set1_epi16((short)(2 * blk))), sc);
                v[blk] = SIMD(kq_dot512)(_mm512_mullo_epi16(c, s2), x + blk);
            }
        }
        _mm256_storeu_ps(s, _mm256_set1_ps(SIMD(ldh)(b + (q3 ? 108 : 80))));
        _mm256_storeu_ps(m, _mm256_setzero_ps());
        return 1;
    }
    default:
        return 0;
    }
}
#endif

/* kq_decode_rows for Q6_K (SIMD(gq_s16)): of one row (ne0, whole
 * super-blocks), the exact dot of each 16 elements with the token into R
 * (2 ne0 / 32) and its scale into D (2 ne0 / 32, 16 apart), through the
 * chunk k. */
SIMD_INLINE void SIMD(kq_half_dots)(const uint8_t *row, int64_t ne0, const struct llm_qx16 *xq,
                                    int32_t *R, float *D, struct SIMD(kq_chunk) *k)
{
    for (int64_t e0 = 0; e0 < ne0; e0 += 256) {
        SIMD(kq_unpack)(LLM_TYPE_Q6_K, row, e0, 256, k);
        __m256i v[16];
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            const struct llm_qx16 *x = xq + e0 / 32 + g / 2;
            v[g] = KQ_DOT(_mm256_setzero_si256(), _mm256_load_si256((const __m256i *)(k->c + 16 * g)),
                          _mm256_loadu_si256((const __m256i *)(x->qs + 16 * (g % 2))));
            D[(e0 / 16 + g) * 16] = k->s[g];
        }
        _mm256_storeu_si256((__m256i *)(R + e0 / 16), SIMD(hsum8x8)(v));
        _mm256_storeu_si256((__m256i *)(R + e0 / 16 + 8), SIMD(hsum8x8)(v + 8));
    }
}

/* matmul_gemm.h's decode (SIMD(gq_decode_rows)) for these types: each row
 * read once, a chunk at a time, each block's exact int32 dot with the
 * token (8 lanes, summed 8 blocks at a time: a chunk of 256 is 8 blocks),
 * then SIMD(gq_decode_finish) in the GEMM's float order. */
static void SIMD(kq_decode_rows)(enum llm_type t, const uint8_t *W, uint64_t rb,
                                 const struct llm_qx16 *xq, int64_t nq, int64_t ne0, float *y,
                                 int64_t r0, int64_t r1, int32_t *R, int32_t *I, float *D, float *M)
{
    const int s16 = SIMD(gq_s16)(t), q2 = SIMD(gq_q2)(t);
    const int64_t nq8 = (nq + 7) / 8 * 8, nh8 = ((nq << s16) + 7) / 8 * 8;
    struct SIMD(kq_chunk) k;
    for (int64_t r = r0; r < r1; r += 16) {
        const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
        for (int i = 0; i < 16; i++) {
            if (i >= nr) {
                memset(R + i * nh8, 0, (size_t)nh8 * sizeof(int32_t));
                for (int64_t q = 0; q < nq * (q2 ? 3 : 1); q++)
                    M[q * 16 + i] = 0.0f;
                for (int64_t q = 0; q < nq << s16; q++)
                    D[q * 16 + i] = 0.0f;
                continue;
            }
            const uint8_t *row = W + (uint64_t)(r + i) * rb;
            if (s16) {
                SIMD(kq_half_dots)(row, ne0, xq, R + i * nh8, D + i, &k);
                continue;
            }
            for (int64_t e0 = 0; e0 < nq8 * 32; e0 += 256) {
                const int n = ne0 - e0 < 256 ? (int)(ne0 - e0) : 256;
                __m256i v[8];
#ifdef SIMD_AVX512
                float s8[8], m8[8];
                if (SIMD(kq_dots)(t, row, e0, n, xq + e0 / 32, v, s8, m8)) {
                    for (int b = n / 32; b < 8; b++)
                        v[b] = _mm256_setzero_si256();
                    float m16[16], dm = 0.0f, *m = m8;
                    if (q2) { /* Q2_K's minimums per 16 */
                        SIMD(kq_mins_k2)(row + e0 / 256 * 84, m16, &dm);
                        m = m16;
                    }
                    for (int b = 0; b < n / 32; b++)
                        SIMD(kq_put)(D, M, e0 / 32 + b, i, s8[b], m + (b << q2), dm, q2);
                    _mm256_storeu_si256((__m256i *)(R + i * nq8 + e0 / 32), SIMD(hsum8x8)(v));
                    continue;
                }
#endif
                SIMD(kq_unpack_gemm)(t, row, e0, n, &k);
#pragma GCC unroll 8
                for (int b = 0; b < 8; b++) {
                    if (b >= n / 32) {
                        v[b] = _mm256_setzero_si256();
                        continue;
                    }
                    const struct llm_qx16 *x = xq + e0 / 32 + b;
                    const __m256i c0 = _mm256_load_si256((const __m256i *)(k.c + 32 * b));
                    const __m256i c1 = _mm256_load_si256((const __m256i *)(k.c + 32 * b + 16));
                    v[b] = KQ_DOT(KQ_DOT(_mm256_setzero_si256(), c0,
                                         _mm256_loadu_si256((const __m256i *)x->qs)),
                                  c1, _mm256_loadu_si256((const __m256i *)(x->qs + 16)));
                    SIMD(kq_put)(D, M, e0 / 32 + b, i, k.s[b], k.m + (b << q2), q2 ? k.dm : 0.0f, q2);
                }
                _mm256_storeu_si256((__m256i *)(R + i * nq8 + e0 / 32), SIMD(hsum8x8)(v));
            }
        }
        SIMD(gq_decode_finish)(R, I, D, M, xq, nq, llm_kq_has_min(t), y + r, nr, s16, q2);
    }
}

/* llm_matmul for these types: Y[b*ldy + r], b < nb, r in [r0, r1) */
static llm_status SIMD(kq_matmul)(enum llm_type t, const uint8_t *W, uint64_t rb, const float *X,
                                  float *Y, int64_t ne0, int64_t nb, int64_t ldy, int64_t r0,
                                  int64_t r1)
{
    /* the int16 GEMM's zero-point form carries the minimums (m ds; Q2_K's
     * SIMD(q2min)); the symmetric one starts its sums at 0 (q8: codes are
     * signed) */
    const struct SIMD(shape) sh = { llm_kq_has_min(t) ? F_ZP8 : F_SYM8, 32, 0, 0 };
    if (nb == 1)
        return SIMD(gq_decode)(t, W, rb, X, Y, ne0, r0, r1);
    return SIMD(gemm_q16)(t, &sh, W, rb, X, Y, ne0, nb, ldy, r0, r1, 0);
}
