/* matmul_gemm.h: the prefill product (llm_matmul with many tokens) as a
 * register-blocked float GEMM; included by matmul_simd.h, so compiled once
 * per ISA variant. Not a public header; it holds function definitions.
 *
 * Y (nb, ldy) = X (nb, ne0) . W^T, W (rows, ne0) of any weight type:
 *   - k is cut into panels of GM_KC; the activations stay where they are
 *     (the micro-kernel broadcasts them from their rows: packing them
 *     cost more than it saved, up to 40% of the time at 96 rows a call);
 *   - the rows are cut into tiles of GM_MR, and a block of GM_RB tiles is
 *     packed k-major (P[k][i], rows in vector lanes): the 8x8 transposes of
 *     float rows, or of 32-element blocks dequantized to float in registers
 *     for the other types (only this L2-sized tile, never the matrix);
 *   - the micro-kernel holds a GM_MR x GM_NR tile of Y in registers
 *     (AVX-512: 32 rows x 12 tokens, 24 zmm accumulators; AVX2: 16 x 6) and
 *     per k loads GM_MV weight vectors and broadcasts GM_NR activations, so
 *     that each loaded value feeds several FMAs; its rows are contiguous in
 *     Y, so results are stored (or added, after the first panel) as vectors.
 * Every type meets float activations here: exact up to float rounding
 * (the 1e-5 S bound of the float path). At the end of the file, for
 * AVX-512 only: the int16 GEMM of the int8/int4 types under int16
 * activations (the default), with the row kernels' int16 bound.
 */

#ifdef SIMD_AVX512
#define GM_V 16
#define GM_NR 12
#else
#define GM_V 8
#define GM_NR 6
#endif
#define GM_MV 2
#define GM_MR (GM_MV * GM_V)
/* k per panel: a multiple of every block size (32, 64, 128) */
#define GM_KC 256
/* tokens per chunk (a multiple of GM_NR) */
#define GM_NBC 768
/* row tiles per packed block: 256 rows x GM_KC floats = 256 KiB, in L2 */
#define GM_RB (256 / GM_MR)

SIMD_INLINE void SIMD(fstore)(float *p, SIMD(fv) v)
{
#ifdef SIMD_AVX512
    _mm512_storeu_ps(p, v);
#else
    _mm256_storeu_ps(p, v);
#endif
}

SIMD_INLINE SIMD(fv) SIMD(fadd)(SIMD(fv) a, SIMD(fv) b)
{
#ifdef SIMD_AVX512
    return _mm512_add_ps(a, b);
#else
    return _mm256_add_ps(a, b);
#endif
}

/* out (NT, ldo) = (add ? out : 0) + X^T P over kc: P (kc, GM_MR), token t
 * at xr[t] (kc floats) */
SIMD_INLINE void SIMD(gemm_micro)(const float *P, const float *const *xr, int64_t kc, int NT,
                                  float *out, int64_t ldo, int add)
{
    SIMD(fv) c[GM_NR][GM_MV];
    const float *x[GM_NR];
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++) {
        x[t] = xr[t];
#pragma GCC unroll 4
        for (int v = 0; v < GM_MV; v++)
            c[t][v] = SIMD(fzero)();
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        const float *p = P + k * GM_MR;
        SIMD(fv) w[GM_MV];
#pragma GCC unroll 4
        for (int v = 0; v < GM_MV; v++)
            w[v] = SIMD(fload)(p + v * GM_V);
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) {
            const SIMD(fv) xt = SIMD(fset1)(x[t][k]);
#pragma GCC unroll 4
            for (int v = 0; v < GM_MV; v++)
                c[t][v] = SIMD(fma)(w[v], xt, c[t][v]);
        }
    }
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
        for (int v = 0; v < GM_MV; v++) {
            float *o = out + t * ldo + v * GM_V;
            SIMD(fstore)(o, add ? SIMD(fadd)(c[t][v], SIMD(fload)(o)) : c[t][v]);
        }
}

/* gemm_micro with NT a constant */
static void SIMD(gemm_micro_n)(const float *P, const float *const *xr, int64_t kc, int nt,
                               float *out, int64_t ldo, int add)
{
    switch (nt) {
#define GM_CASE(n)                                          \
    case n:                                                 \
        SIMD(gemm_micro)(P, xr, kc, n, out, ldo, add); \
        break;
        GM_CASE(1) GM_CASE(2) GM_CASE(3) GM_CASE(4) GM_CASE(5) GM_CASE(6)
#if GM_NR > 6
        GM_CASE(7) GM_CASE(8) GM_CASE(9) GM_CASE(10) GM_CASE(11) GM_CASE(12)
#endif
#undef GM_CASE
    default:
        break;
    }
}

/* 8 rows of 8 floats -> 8 columns */
SIMD_INLINE void SIMD(tr8)(__m256 r[8])
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* out[j - k0] = w(j) for j in [k0, k1) of one row of an int8/int4/int3 type
 * (k0 a multiple of 32); fam, G, BB, hdr constants after inlining */
SIMD_INLINE void SIMD(gemm_deq_q)(const uint8_t *row, int64_t ne0, int64_t k0, int64_t k1,
                                  int fam, int G, int BB, int hdr, float *out)
{
    const int sgn = fam == F_SYM8 || fam == F_SYM4;
    for (int64_t k = k0 / 32; 32 * k < k1; k++) {
        float dw, m, tmp[32];
        __m128i c0, c1;
        SIMD(codes2)(row, k, ne0, fam, G, BB, hdr, &dw, &m, &c0, &c1);
        SIMD(fv) f[SIMD_NV];
        SIMD(codes_to_f)(c0, c1, sgn, f);
        const int full = 32 * k + 32 <= k1;
        float *o = full ? out + (32 * k - k0) : tmp;
        /* w = d c + m, rounded once as llm_dequantize_row rounds it */
        for (int v = 0; v < SIMD_NV; v++)
            SIMD(fstore)(o + v * (32 / SIMD_NV), SIMD(fma)(f[v], SIMD(fset1)(dw), SIMD(fset1)(m)));
        if (!full)
            memcpy(out + (32 * k - k0), tmp, (size_t)(k1 - 32 * k) * sizeof(float));
    }
}

/* out[j] = w(k0 + j) for j < kc of one row of a type other than f32, as
 * float (k0 a multiple of GM_KC; k0 + kc <= ne0) */
static void SIMD(gemm_deq)(enum llm_type t, const uint8_t *row, int64_t ne0, int64_t k0,
                           int64_t kc, float *out)
{
    const int64_t k1 = k0 + kc;
    switch (t) {
    case LLM_TYPE_F16:
    case LLM_TYPE_BF16: {
        int64_t i = k0;
        for (; i + 8 <= k1; i += 8)
            _mm256_storeu_ps(out + i - k0, SIMD(ldw)(row, i, t));
        for (; i < k1; i++)
            out[i - k0] = SIMD(ldw1)(row, i, t);
        return;
    }
    case LLM_TYPE_FP8_E4M3: { /* the table keeps the NaN codes NaN */
        const float *tab = llm_matmul_fp8_table();
        const __m256 r = _mm256_set1_ps(SIMD(ldf)(row));
        const uint8_t *q = row + 4;
        int64_t i = k0;
        for (; i + 8 <= k1; i += 8) {
            __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
            _mm256_storeu_ps(out + i - k0, _mm256_mul_ps(_mm256_i32gather_ps(tab, idx, 4), r));
        }
        for (; i < k1; i++)
            out[i - k0] = tab[q[i]] * SIMD(ldf)(row);
        return;
    }
    case LLM_TYPE_NF4:
    case LLM_TYPE_NF4_DQ: {
        static const float book[16] = LLM_NF4_VALUES;
        const int dq = t == LLM_TYPE_NF4_DQ, BB = dq ? 33 : 34, hdr = dq ? 4 : 0;
        const float *fp8 = llm_matmul_fp8_table();
        const float rs = dq ? SIMD(ldf)(row) : 0.0f;
        for (int64_t e0 = k0; e0 < k1; e0 += 64) {
            const uint8_t *blk = row + hdr + (e0 / 64) * BB;
            const __m256 d = _mm256_set1_ps(dq ? fp8[blk[0]] * rs : SIMD(ldh)(blk));
            const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + BB - 32));
            const __m256i lo4 = _mm256_set1_epi8(15);
            uint8_t codes[64];
            _mm256_storeu_si256((__m256i *)codes, _mm256_and_si256(q, lo4));
            _mm256_storeu_si256((__m256i *)(codes + 32),
                                _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4));
            /* the code book in two registers: permute each half, blend on bit 3 */
            const __m256 tlo = _mm256_loadu_ps(book), thi = _mm256_loadu_ps(book + 8);
            float v[64];
            for (int g = 0; g < 8; g++) {
                __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(codes + 8 * g)));
                __m256 b = _mm256_blendv_ps(_mm256_permutevar8x32_ps(tlo, idx),
                                            _mm256_permutevar8x32_ps(thi, idx),
                                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
                _mm256_storeu_ps(v + 8 * g, _mm256_mul_ps(b, d));
            }
            const int64_t n = k1 - e0 < 64 ? k1 - e0 : 64;
            memcpy(out + (e0 - k0), v, (size_t)n * sizeof(float));
        }
        return;
    }
    default:
        break;
    }
    switch (t) {
#define GM_DEQ(T, FAM, G, BB, HDR)                                      \
    case T:                                                             \
        SIMD(gemm_deq_q)(row, ne0, k0, k1, FAM, G, BB, HDR, out); \
        return;
        GM_DEQ(LLM_TYPE_Q8_0, F_SYM8, 32, 34, 0)
        GM_DEQ(LLM_TYPE_Q8_G64, F_SYM8, 64, 66, 0)
        GM_DEQ(LLM_TYPE_Q8_G128, F_SYM8, 128, 130, 0)
        GM_DEQ(LLM_TYPE_Q8_CH, F_SYM8, 0, 1, 4)
        GM_DEQ(LLM_TYPE_Q8Z_G32, F_ZP8, 32, 36, 0)
        GM_DEQ(LLM_TYPE_Q8Z_G64, F_ZP8, 64, 68, 0)
        GM_DEQ(LLM_TYPE_Q8Z_G128, F_ZP8, 128, 132, 0)
        GM_DEQ(LLM_TYPE_Q8Z_CH, F_ZP8, 0, 1, 8)
        GM_DEQ(LLM_TYPE_Q4_0, F_SYM4, 32, 18, 0)
        GM_DEQ(LLM_TYPE_Q4_G64, F_SYM4, 64, 34, 0)
        GM_DEQ(LLM_TYPE_Q4_G128, F_SYM4, 128, 66, 0)
        GM_DEQ(LLM_TYPE_Q4_CH, F_SYM4, 32, 16, 4)
        GM_DEQ(LLM_TYPE_Q4_1, F_ZP4, 32, 20, 0)
        GM_DEQ(LLM_TYPE_Q4Z_G64, F_ZP4, 64, 36, 0)
        GM_DEQ(LLM_TYPE_Q4Z_G128, F_ZP4, 128, 68, 0)
        GM_DEQ(LLM_TYPE_Q4Z_CH, F_ZP4, 32, 16, 8)
        GM_DEQ(LLM_TYPE_Q3Z_G32, F_ZP3, 32, 16, 0)
        GM_DEQ(LLM_TYPE_Q3Z_G64, F_ZP3, 64, 28, 0)
        GM_DEQ(LLM_TYPE_Q3Z_G128, F_ZP3, 128, 52, 0)
        GM_DEQ(LLM_TYPE_Q3Z_CH, F_ZP3, 32, 12, 8)
#undef GM_DEQ
    default:
        return;
    }
}

static const float SIMD(gm_zero)[GM_KC];

/* P (kc, GM_MR): P[k][i] = w(r + i, k0 + k), 0 for i >= nr; tmp (GM_MR,
 * GM_KC) holds the dequantized rows of the types other than f32 */
static void SIMD(gemm_pack_w)(enum llm_type t, const uint8_t *W, uint64_t rb, int64_t r, int nr,
                              int64_t ne0, int64_t k0, int64_t kc, float *tmp, float *P)
{
    const float *src[GM_MR];
    for (int i = 0; i < GM_MR; i++) {
        if (i >= nr) {
            src[i] = SIMD(gm_zero);
        } else if (t == LLM_TYPE_F32) {
            src[i] = (const float *)(W + (uint64_t)(r + i) * rb) + k0;
        } else {
            SIMD(gemm_deq)(t, W + (uint64_t)(r + i) * rb, ne0, k0, kc, tmp + i * GM_KC);
            src[i] = tmp + i * GM_KC;
        }
    }
    /* 8 rows at a time: 8 read streams, each 8x8 block transposed in registers */
    const int64_t k8 = kc / 8 * 8;
    for (int i0 = 0; i0 < GM_MR; i0 += 8) {
        const float *s0 = src[i0], *s1 = src[i0 + 1], *s2 = src[i0 + 2], *s3 = src[i0 + 3];
        const float *s4 = src[i0 + 4], *s5 = src[i0 + 5], *s6 = src[i0 + 6], *s7 = src[i0 + 7];
        float *p = P + i0;
        for (int64_t k = 0; k < k8; k += 8, p += 8 * GM_MR) {
            __m256 v[8] = { _mm256_loadu_ps(s0 + k), _mm256_loadu_ps(s1 + k),
                            _mm256_loadu_ps(s2 + k), _mm256_loadu_ps(s3 + k),
                            _mm256_loadu_ps(s4 + k), _mm256_loadu_ps(s5 + k),
                            _mm256_loadu_ps(s6 + k), _mm256_loadu_ps(s7 + k) };
            SIMD(tr8)(v);
            _mm256_store_ps(p, v[0]);
            _mm256_store_ps(p + GM_MR, v[1]);
            _mm256_store_ps(p + 2 * GM_MR, v[2]);
            _mm256_store_ps(p + 3 * GM_MR, v[3]);
            _mm256_store_ps(p + 4 * GM_MR, v[4]);
            _mm256_store_ps(p + 5 * GM_MR, v[5]);
            _mm256_store_ps(p + 6 * GM_MR, v[6]);
            _mm256_store_ps(p + 7 * GM_MR, v[7]);
        }
    }
    for (int64_t k = k8; k < kc; k++)
        for (int i = 0; i < GM_MR; i++)
            memcpy(P + k * GM_MR + i, src[i] + k, sizeof(float));
}

/* Y[b*ldy + r] = W[r] . X[b] for b < nb, r in [r0, r1); P and tmp as
 * SIMD(gemm) allocates them */
static void SIMD(gemm_chunk)(enum llm_type t, const uint8_t *W, uint64_t rb, const float *X,
                             float *Y, int64_t ne0, int64_t nb, int64_t ldy, int64_t r0,
                             int64_t r1, float *P, float *tmp)
{
    const int64_t ng = (nb + GM_NR - 1) / GM_NR;
    for (int64_t k0 = 0; k0 < ne0; k0 += GM_KC) {
        const int64_t kc = ne0 - k0 < GM_KC ? ne0 - k0 : GM_KC;
        const int add = k0 > 0;
        for (int64_t rb0 = r0; rb0 < r1; rb0 += GM_RB * GM_MR) {
            const int64_t rows = r1 - rb0 < GM_RB * GM_MR ? r1 - rb0 : GM_RB * GM_MR;
            const int ntile = (int)((rows + GM_MR - 1) / GM_MR);
            for (int i = 0; i < ntile; i++) {
                const int64_t r = rb0 + (int64_t)i * GM_MR;
                const int nr = r1 - r < GM_MR ? (int)(r1 - r) : GM_MR;
                SIMD(gemm_pack_w)(t, W, rb, r, nr, ne0, k0, kc, tmp,
                                  P + (uint64_t)i * GM_MR * GM_KC);
            }
            for (int64_t g = 0; g < ng; g++) {
                const int nt = nb - g * GM_NR < GM_NR ? (int)(nb - g * GM_NR) : GM_NR;
                /* the activations are broadcast from their rows: no packing */
                const float *xr[GM_NR];
                for (int tt = 0; tt < nt; tt++)
                    xr[tt] = X + (g * GM_NR + tt) * ne0 + k0;
                for (int i = 0; i < ntile; i++) {
                    const int64_t r = rb0 + (int64_t)i * GM_MR;
                    const int nr = r1 - r < GM_MR ? (int)(r1 - r) : GM_MR;
                    const float *p = P + (uint64_t)i * GM_MR * GM_KC;
                    float *y = Y + g * GM_NR * ldy + r;
                    if (nr == GM_MR) {
                        SIMD(gemm_micro_n)(p, xr, kc, nt, y, ldy, add);
                        continue;
                    }
                    /* a partial tile: through a full-width buffer, so
                     * that rows past r1 are never touched */
                    float c[GM_NR * GM_MR] = { 0 };
                    for (int tt = 0; tt < nt; tt++)
                        for (int j = 0; j < nr; j++)
                            c[tt * GM_MR + j] = add ? y[tt * ldy + j] : 0.0f;
                    SIMD(gemm_micro_n)(p, xr, kc, nt, c, GM_MR, add);
                    for (int tt = 0; tt < nt; tt++)
                        memcpy(y + tt * ldy, c + tt * GM_MR, (size_t)nr * sizeof(float));
                }
            }
        }
    }
}

/* Y[b*ldy + r] = W[r] . X[b] for b < nb, r in [r0, r1), in float */
static llm_status SIMD(gemm)(enum llm_type t, const uint8_t *W, uint64_t rb, const float *X,
                             float *Y, int64_t ne0, int64_t nb, int64_t ldy, int64_t r0, int64_t r1)
{
    const int64_t tiles = (r1 - r0 + GM_MR - 1) / GM_MR;
    const uint64_t np = (uint64_t)(tiles < GM_RB ? tiles : GM_RB) * GM_MR * GM_KC;
    const uint64_t ntmp = t == LLM_TYPE_F32 ? 0 : (uint64_t)GM_MR * GM_KC;
    float *buf = llm_malloc((size_t)(np + ntmp + 16) * sizeof(float));
    if (!buf)
        return LLM_E_NOMEM;
    /* 64-byte aligned packed tiles: the micro-kernel's vector loads */
    float *P = (float *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    /* GM_NBC tokens at a time, so that their activations and outputs stay
     * in cache across the k panels (the quantizer multiplies 65536 tokens
     * at once); each chunk packs the weights again, a few % of its work */
    for (int64_t c0 = 0; c0 < nb; c0 += GM_NBC)
        SIMD(gemm_chunk)(t, W, rb, X + c0 * ne0, Y + c0 * ldy, ne0,
                         nb - c0 < GM_NBC ? nb - c0 : GM_NBC, ldy, r0, r1, P, P + np);
    llm_free(buf);
    return LLM_OK;
}

// ----------------------------------------------------------------------------
// the int8/int4/int3 types under int16 activations (the default): an
// integer GEMM on vpdpwssd (AVX2: madd + add), with the same activations
// (struct llm_qx16) and so the same error bound as the row kernels.
//   - the tokens go GQ_NBC at a time: their activations are quantized once
//     (nq blocks each) and shared by every row tile;
//   - a tile of 16 rows is packed block by block as pairs of int16 codes,
//     the pair (2p, 2p+1) of row i in int32 lane i of vector p (16 vectors
//     a block), with the row's scale and min per block (the -8 of q4
//     symmetric applied in the codes, so no offset term is needed);
//   - the micro-kernel keeps GQ_NR tokens x 16 rows: per block an int32 dot
//     per token (16 multiply-adds with the token's pair broadcast), exact,
//     then one float FMA with d_w d_x and, for the zero-point types, one
//     with m ds. Q6_K, whose scales cover 16 elements and cannot be
//     folded into its codes (32 such products could overflow an int32
//     sum), takes a float FMA per half block (s16: D holds two scales a
//     block); Q2_K, a minimum per 16 elements, folds its 4-bit sub-scales
//     into its codes and takes its minimums from the token's half-block
//     sums (q2: M holds three vectors a block, SIMD(q2min)).
// That float order, per row and token, is the same for every number of
// tokens, every ISA and both layouts (rows, x16), and x16_group's decode
// follows it too: this GEMM is also the decode of the rows that are not
// interleaved, so that a token's result never depends on its batch.

#ifdef SIMD_AVX512
#define GQ_NR 12
#define GQ_H 1 /* vectors per 16 rows */
typedef __m512i SIMD(gqi);
typedef __m512 SIMD(gqf);
#else
#define GQ_NR 3
#define GQ_H 2
typedef __m256i SIMD(gqi);
typedef __m256 SIMD(gqf);
#endif
#define GQ_NBC 256

SIMD_INLINE SIMD(gqi) SIMD(gq_load)(const int32_t *p)
{
#ifdef SIMD_AVX512
    return _mm512_load_si512((const void *)p);
#else
    return _mm256_load_si256((const __m256i *)p);
#endif
}

SIMD_INLINE SIMD(gqi) SIMD(gq_set1)(int32_t v)
{
#ifdef SIMD_AVX512
    return _mm512_set1_epi32(v);
#else
    return _mm256_set1_epi32(v);
#endif
}

SIMD_INLINE SIMD(gqf) SIMD(gq_fzero)(void)
{
#ifdef SIMD_AVX512
    return _mm512_setzero_ps();
#else
    return _mm256_setzero_ps();
#endif
}

/* acc + w . pair, per int32 lane: exact (no saturation) */
SIMD_INLINE SIMD(gqi) SIMD(gq_dp)(SIMD(gqi) acc, SIMD(gqi) w, int32_t pair)
{
#ifdef SIMD_AVX512
    return _mm512_dpwssd_epi32(acc, w, _mm512_set1_epi32(pair));
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(w, _mm256_set1_epi32(pair)));
#endif
}

/* 16 x 16 int32 at b, transposed in place: four 8 x 8 blocks through the
 * float transpose (shuffles move bits, never change them) */
static void SIMD(gq_tr16)(int32_t *b)
{
    __m256 q[4][8];
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 2; c++) {
            for (int i = 0; i < 8; i++)
                q[2 * a + c][i] = _mm256_loadu_ps((const float *)(b + (8 * a + i) * 16 + 8 * c));
            SIMD(tr8)(q[2 * a + c]);
        }
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < 8; i++) /* block (a, c) transposed goes to (c, a) */
                _mm256_storeu_ps((float *)(b + (8 * c + i) * 16 + 8 * a), q[2 * a + c][i]);
}

/* Pack rows [r, r + nr) (nr <= 16; missing rows are zero) of blocks
 * [0, nq): P (nq, 16 pairs, 16 lanes) int32, D and M (nq, 16). Each row is
 * read once, in order (one stream), into its lane of every block, and each
 * block is then transposed. fam, G, BB, hdr are constants after inlining
 * (SIMD(gq_pack)), so that the block arithmetic of codes16 folds. */
SIMD_INLINE void SIMD(gq_pack_rows)(const uint8_t *W, uint64_t rb, int64_t r, int nr, int64_t ne0,
                                    int64_t nq, int32_t *P, float *D, float *M, int fam, int G,
                                    int BB, int hdr)
{
    for (int i = 0; i < 16; i++) {
        if (i >= nr) {
            for (int64_t k = 0; k < nq; k++) {
                memset(P + k * 256 + i * 16, 0, 16 * sizeof(int32_t));
                D[k * 16 + i] = M[k * 16 + i] = 0.0f;
            }
            continue;
        }
        const uint8_t *row = W + (uint64_t)(r + i) * rb;
        for (int64_t k = 0; k < nq; k++) {
            __m128 dm;
            __m256i w0, w1;
            SIMD(codes16)(row, k, ne0, fam, G, BB, hdr, &dm, &w0, &w1);
            /* pairs 0-7 and 8-15 of row i, before the transpose */
            _mm256_storeu_si256((__m256i *)(P + k * 256 + i * 16), w0);
            _mm256_storeu_si256((__m256i *)(P + k * 256 + i * 16 + 8), w1);
            D[k * 16 + i] = _mm_cvtss_f32(dm);
            M[k * 16 + i] = FAM_ZP(fam) ? _mm_cvtss_f32(_mm_movehdup_ps(dm)) : 0.0f;
        }
    }
    for (int64_t k = 0; k < nq; k++)
        SIMD(gq_tr16)(P + k * 256);
}

/* the GGUF block types' packing and decode (matmul_kq.h) */
static void SIMD(kq_decode_rows)(enum llm_type t, const uint8_t *W, uint64_t rb,
                                 const struct llm_qx16 *xq, int64_t nq, int64_t ne0, float *y,
                                 int64_t r0, int64_t r1, int32_t *R, int32_t *I, float *D, float *M);
static void SIMD(kq_pack)(enum llm_type t, const uint8_t *W, uint64_t rb, int64_t r, int nr,
                          int64_t ne0, int64_t nq, int32_t *P, float *D, float *M);

static void SIMD(gq_pack)(enum llm_type t, const uint8_t *W, uint64_t rb, int64_t r, int nr,
                          int64_t ne0, int64_t nq, int32_t *P, float *D, float *M)
{
    if (llm_kq_type(t)) {
        SIMD(kq_pack)(t, W, rb, r, nr, ne0, nq, P, D, M);
        return;
    }
    switch (t) {
#define GQ_PACK(T, FAM, G, BB, HDR)                                                   \
    case T:                                                                           \
        SIMD(gq_pack_rows)(W, rb, r, nr, ne0, nq, P, D, M, FAM, G, BB, HDR); \
        break;
        GQ_PACK(LLM_TYPE_Q8_0, F_SYM8, 32, 34, 0)
        GQ_PACK(LLM_TYPE_Q8_G64, F_SYM8, 64, 66, 0)
        GQ_PACK(LLM_TYPE_Q8_G128, F_SYM8, 128, 130, 0)
        GQ_PACK(LLM_TYPE_Q8_CH, F_SYM8, 0, 1, 4)
        GQ_PACK(LLM_TYPE_Q8Z_G32, F_ZP8, 32, 36, 0)
        GQ_PACK(LLM_TYPE_Q8Z_G64, F_ZP8, 64, 68, 0)
        GQ_PACK(LLM_TYPE_Q8Z_G128, F_ZP8, 128, 132, 0)
        GQ_PACK(LLM_TYPE_Q8Z_CH, F_ZP8, 0, 1, 8)
        GQ_PACK(LLM_TYPE_Q4_0, F_SYM4, 32, 18, 0)
        GQ_PACK(LLM_TYPE_Q4_G64, F_SYM4, 64, 34, 0)
        GQ_PACK(LLM_TYPE_Q4_G128, F_SYM4, 128, 66, 0)
        GQ_PACK(LLM_TYPE_Q4_CH, F_SYM4, 32, 16, 4)
        GQ_PACK(LLM_TYPE_Q4_1, F_ZP4, 32, 20, 0)
        GQ_PACK(LLM_TYPE_Q4Z_G64, F_ZP4, 64, 36, 0)
        GQ_PACK(LLM_TYPE_Q4Z_G128, F_ZP4, 128, 68, 0)
        GQ_PACK(LLM_TYPE_Q4Z_CH, F_ZP4, 32, 16, 8)
        GQ_PACK(LLM_TYPE_Q3Z_G32, F_ZP3, 32, 16, 0)
        GQ_PACK(LLM_TYPE_Q3Z_G64, F_ZP3, 64, 28, 0)
        GQ_PACK(LLM_TYPE_Q3Z_G128, F_ZP3, 128, 52, 0)
        GQ_PACK(LLM_TYPE_Q3Z_CH, F_ZP3, 32, 12, 8)
#undef GQ_PACK
    default:
        break;
    }
}

/* Where the micro-kernel reads a tile: packed (P, D, M), or a group of
 * interleaved rows read in place (grp: codes widened as they are used,
 * scales converted per block; q8: the 8-bit layout; G: elements a scale). */
struct SIMD(gq_src) {
    const int32_t *P;
    const float *D, *M;
    const uint8_t *grp;
    int q8, G, BB;
    int s16; /* a scale per 16 elements: D (nq, 2, 16), packed P only */
    int q2;  /* Q2_K's minimums: M (nq, 3, 16), packed P only (SIMD(q2min)) */
};

/* Whether t's blocks of 32 have a scale per half (gq_src.s16): Q6_K.
 * (Q3_K and Q2_K fold their 16-element sub-scales into the codes.) */
static inline int SIMD(gq_s16)(enum llm_type t)
{
    return t == LLM_TYPE_Q6_K;
}

/* Whether t's minimums cover 16 elements (gq_src.q2): Q2_K. */
static inline int SIMD(gq_q2)(enum llm_type t)
{
    return t == LLM_TYPE_Q2_K;
}

/* The 32 code bytes at c (AVX2: 16) as int16 lanes, their low and high
 * nibbles, and a store of a vector of pairs */
SIMD_INLINE SIMD(gqi) SIMD(gq_widen4)(const uint8_t *c)
{
#ifdef SIMD_AVX512
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)c));
#else
    return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)c));
#endif
}

SIMD_INLINE SIMD(gqi) SIMD(gq_lo4)(SIMD(gqi) v)
{
#ifdef SIMD_AVX512
    return _mm512_and_si512(v, _mm512_set1_epi16(15));
#else
    return _mm256_and_si256(v, _mm256_set1_epi16(15));
#endif
}

SIMD_INLINE SIMD(gqi) SIMD(gq_hi4)(SIMD(gqi) v)
{
#ifdef SIMD_AVX512
    return _mm512_srli_epi16(v, 4);
#else
    return _mm256_srli_epi16(v, 4);
#endif
}

SIMD_INLINE void SIMD(gq_store)(int32_t *p, SIMD(gqi) v)
{
#ifdef SIMD_AVX512
    _mm512_store_si512((void *)p, v);
#else
    _mm256_store_si256((__m256i *)p, v);
#endif
}

/* The 16 pair vectors of activation block k of an interleaved group, as
 * gq_pack makes them of rows (wb: 16 pairs x 16 int32 lanes; AVX2 as two
 * halves of 8): vector p (the pair (2p, 2p+1) of every row) is the unit of
 * the 8-bit layout, or the low or high nibbles of a 4-bit unit (q4
 * symmetric codes stay 0..15: the micro-kernel starts from the token's m8).
 * G is a constant after inlining, so the addressing
 * folds; it is done once per block, not per pair and token. */
SIMD_INLINE void SIMD(gq_x16_block_g)(const struct SIMD(gq_src) *src, int zp, int64_t k,
                                      int32_t *wb, const int G)
{
    const int nsub = G / 32, j = (int)(k % nsub);
    const uint8_t *cq = src->grp + (uint64_t)(k / nsub) * 16 * (uint64_t)src->BB + (zp ? 64 : 32);
    if (src->q8) {
#pragma GCC unroll 16
        for (int p = 0; p < 16; p++) {
            SIMD(gqi) w[GQ_H];
            SIMD(x16_codes8)(cq + 32 * (16 * j + p), zp, w);
            for (int h = 0; h < GQ_H; h++)
                SIMD(gq_store)(wb + p * 16 + 8 * h, w[h]);
        }
        return;
    }
    /* 4-bit: pair p is element e = 32 j + 2 p of every row, the low nibbles
     * of unit e / 2 for e < G / 2, else the high nibbles of unit (e - G/2) / 2.
     * With G = 32 a unit holds pairs p and p + 8: widened once for both. */
    const int np = G == 32 ? 8 : 16;
#pragma GCC unroll 16
    for (int p = 0; p < np; p++) {
        const int e = 32 * j + 2 * p, hi = e >= G / 2, u = (hi ? e - G / 2 : e) / 2;
        for (int h = 0; h < GQ_H; h++) {
            const SIMD(gqi) v = SIMD(gq_widen4)(cq + 32 * u + 16 * h);
            SIMD(gq_store)(wb + p * 16 + 8 * h, hi ? SIMD(gq_hi4)(v) : SIMD(gq_lo4)(v));
            if (G == 32)
                SIMD(gq_store)(wb + (p + 8) * 16 + 8 * h, SIMD(gq_hi4)(v));
        }
    }
}

SIMD_INLINE void SIMD(gq_x16_block)(const struct SIMD(gq_src) *src, int zp, int64_t k,
                                    int32_t *wb)
{
    switch (src->G) {
    case 32:
        SIMD(gq_x16_block_g)(src, zp, k, wb, 32);
        break;
    case 64:
        SIMD(gq_x16_block_g)(src, zp, k, wb, 64);
        break;
    default:
        SIMD(gq_x16_block_g)(src, zp, k, wb, 128);
        break;
    }
}

/* An interleaved group widened once into gq_pack's form (P, D, M), for
 * products of more tokens than one micro-kernel call takes: each call then
 * reads the int16 pairs instead of widening them again. The scales are
 * converted from f16 exactly, so the results are the same bits. */
static void SIMD(gq_x16_to_packed)(const struct SIMD(gq_src) *src, int zp, int64_t nq,
                                   int32_t *P, float *D, float *M)
{
    for (int64_t k = 0; k < nq; k++) {
        SIMD(gq_x16_block)(src, zp, k, P + k * 256);
        const uint8_t *blk = src->grp + (uint64_t)(k / (src->G / 32)) * 16 * (uint64_t)src->BB;
        for (int i = 0; i < 2; i++) {
            _mm256_storeu_ps(D + k * 16 + 8 * i,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * i))));
            _mm256_storeu_ps(M + k * 16 + 8 * i,
                             zp ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 32 + 16 * i)))
                                : _mm256_setzero_ps());
        }
    }
}

/* The float side of one vector of 16 (AVX2: 8) rows and a token's block:
 * acc + float(ia) (d bd), then + m ds for the zero-point types */
SIMD_INLINE SIMD(gqf) SIMD(gq_fma)(SIMD(gqf) acc, SIMD(gqi) ia, SIMD(gqf) d, SIMD(gqf) m,
                                   const struct llm_qx16 *b, int zp)
{
#ifdef SIMD_AVX512
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(d, _mm512_set1_ps(b->d)), acc);
    return zp ? _mm512_fmadd_ps(m, _mm512_set1_ps(b->ds), acc) : acc;
#else
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), _mm256_mul_ps(d, _mm256_set1_ps(b->d)), acc);
    return zp ? _mm256_fmadd_ps(m, _mm256_set1_ps(b->ds), acc) : acc;
#endif
}

/* Half h of a block's 16 scales (or mins): packed floats, or the group's
 * fp16 (AVX-512: h is 0, all 16) */
SIMD_INLINE SIMD(gqf) SIMD(gq_scales)(const float *f, const uint8_t *h16, int h)
{
#ifdef SIMD_AVX512
    (void)h;
    return f ? _mm512_loadu_ps(f) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h16));
#else
    return f ? _mm256_loadu_ps(f + 8 * h)
             : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h16 + 16 * h)));
#endif
}

/* out (NT tokens, 16 rows as GQ_H vectors) = the tile . xq of tokens
 * xq + t*nq. NT is a constant at each call (SIMD(gq_micro_n)), and every
 * token has named registers (its int32 sums ia, float sums acc; _1 the
 * second half of the rows on AVX2), which fold away past NT: written with
 * arrays, GCC 12 kept them in memory (a rep stos per block and two register
 * moves per dot product, half the micro-kernel's time at 16 tokens). */
#define GQ_TOKENS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
SIMD_INLINE void SIMD(gq_micro)(const struct SIMD(gq_src) *src, int zp,
                                const struct llm_qx16 *xq, int64_t nq, int NT, int S16, int Q2,
                                SIMD(gqf) out[][GQ_H])
{
    _Alignas(64) int32_t wb[256];
    const int sym4 = !zp && !src->q8; /* q4 symmetric: the -8 enters through m8 */
    const SIMD(gqf) fz = SIMD(gq_fzero)();
#define GQ_DECL(t)                                                  \
    SIMD(gqf) acc##t##_0 = fz, acc##t##_1 = fz;                      \
    SIMD(gqi) ia##t##_0, ia##t##_1;                                  \
    const struct llm_qx16 *x##t = xq + (t) * nq;
    GQ_TOKENS(GQ_DECL)
#undef GQ_DECL
    for (int64_t k = 0; k < nq; k++) {
#define GQ_INIT(t)                                                  \
    if ((t) < NT)                                                   \
        ia##t##_0 = ia##t##_1 = SIMD(gq_set1)(sym4 ? x##t[k].m8 : 0);
        GQ_TOKENS(GQ_INIT)
#undef GQ_INIT
        /* the block's weights as int16 pairs: packed, or widened from the
         * interleaved group into wb */
        const int32_t *pk = src->P ? src->P + k * 256 : wb;
        if (!src->P)
            SIMD(gq_x16_block)(src, zp, k, wb);
#ifdef SIMD_AVX512
#pragma GCC unroll 16
#else /* 16 ymm registers: unrolled further, the sums spill */
#pragma GCC unroll 4
#endif
        for (int p = 0; p < 16; p++) {
            const SIMD(gqi) w0 = SIMD(gq_load)(pk + p * 16);
            const SIMD(gqi) w1 = GQ_H > 1 ? SIMD(gq_load)(pk + p * 16 + 8) : w0;
#define GQ_DOT(t)                                                   \
    if ((t) < NT) {                                                 \
        int32_t pair;                                               \
        memcpy(&pair, x##t[k].qs + 2 * p, 4);                       \
        ia##t##_0 = SIMD(gq_dp)(ia##t##_0, w0, pair);               \
        if (GQ_H > 1)                                               \
            ia##t##_1 = SIMD(gq_dp)(ia##t##_1, w1, pair);           \
    }
            GQ_TOKENS(GQ_DOT)
#undef GQ_DOT
            if (S16 && p == 7) { /* the first half's scales, then sums from 0 */
                const float *ph = src->D + 2 * k * 16;
#ifdef SIMD_AVX512
                const SIMD(gqf) h0 = _mm512_loadu_ps(ph), h1 = h0;
#else
                const SIMD(gqf) h0 = _mm256_loadu_ps(ph), h1 = _mm256_loadu_ps(ph + 8);
#endif
#define GQ_HALF(t)                                                            \
    if ((t) < NT) {                                                           \
        acc##t##_0 = SIMD(gq_fma)(acc##t##_0, ia##t##_0, h0, fz, x##t + k, 0); \
        if (GQ_H > 1)                                                         \
            acc##t##_1 = SIMD(gq_fma)(acc##t##_1, ia##t##_1, h1, fz, x##t + k, 0); \
        ia##t##_0 = ia##t##_1 = SIMD(gq_set1)(0);                             \
    }
                GQ_TOKENS(GQ_HALF)
#undef GQ_HALF
            }
        }
        /* the group's 16 scales (and mins), or the packed ones (s16: the
         * second half's) */
        const uint8_t *blk =
            src->P ? NULL : src->grp + (uint64_t)(k / (src->G / 32)) * 16 * (uint64_t)src->BB;
        const float *pd = src->P ? src->D + (S16 ? 2 * k + 1 : k) * 16 : NULL;
        const float *pm = src->P ? src->M + k * 16 : NULL;
        const SIMD(gqf) d0 = SIMD(gq_scales)(pd, blk, 0), d1 = SIMD(gq_scales)(pd, blk, 1);
        const uint8_t *mins = blk ? blk + 32 : NULL;
        const SIMD(gqf) m0 = zp && !Q2 ? SIMD(gq_scales)(pm, mins, 0) : fz;
        const SIMD(gqf) m1 = zp && !Q2 ? SIMD(gq_scales)(pm, mins, 1) : fz;
        if (Q2) { /* M (nq, 3, 16): the halves' minimums, then -dmin */
            const float *q = src->M + 3 * k * 16;
#ifdef SIMD_AVX512
            const __m512 a0 = _mm512_loadu_ps(q), b0 = _mm512_loadu_ps(q + 16);
            const __m512 c0 = _mm512_loadu_ps(q + 32), a1 = a0, b1 = b0, c1 = c0;
#else
            const __m256 a0 = _mm256_loadu_ps(q), b0 = _mm256_loadu_ps(q + 16);
            const __m256 c0 = _mm256_loadu_ps(q + 32), a1 = _mm256_loadu_ps(q + 8);
            const __m256 b1 = _mm256_loadu_ps(q + 24), c1 = _mm256_loadu_ps(q + 40);
#endif
#define GQ_SCALE(t)                                                                \
    if ((t) < NT) {                                                                \
        acc##t##_0 = SIMD(gq_fma)(acc##t##_0, ia##t##_0, d0, fz, x##t + k, 0);     \
        acc##t##_0 = SIMD(q2min)(acc##t##_0, a0, b0, c0, x##t + k);              \
        if (GQ_H > 1) {                                                            \
            acc##t##_1 = SIMD(gq_fma)(acc##t##_1, ia##t##_1, d1, fz, x##t + k, 0); \
            acc##t##_1 = SIMD(q2min)(acc##t##_1, a1, b1, c1, x##t + k);          \
        }                                                                          \
    }
            GQ_TOKENS(GQ_SCALE)
#undef GQ_SCALE
            continue;
        }
#define GQ_SCALE(t)                                                      \
    if ((t) < NT) {                                                      \
        acc##t##_0 = SIMD(gq_fma)(acc##t##_0, ia##t##_0, d0, m0, x##t + k, zp); \
        if (GQ_H > 1)                                                    \
            acc##t##_1 = SIMD(gq_fma)(acc##t##_1, ia##t##_1, d1, m1, x##t + k, zp); \
    }
        GQ_TOKENS(GQ_SCALE)
#undef GQ_SCALE
    }
#define GQ_OUT(t)                                                   \
    if ((t) < NT) {                                                 \
        out[t][0] = acc##t##_0;                                     \
        if (GQ_H > 1)                                               \
            out[t][GQ_H - 1] = acc##t##_1;                          \
    }
    GQ_TOKENS(GQ_OUT)
#undef GQ_OUT
}
#undef GQ_TOKENS

/* gq_micro with NT a constant */
static void SIMD(gq_micro_n)(const struct SIMD(gq_src) *src, int zp, const struct llm_qx16 *xq,
                             int64_t nq, int nt, SIMD(gqf) out[][GQ_H])
{
#define GQ_CASE(n, s, q2)                                 \
    case n:                                               \
        SIMD(gq_micro)(src, zp, xq, nq, n, s, q2, out);   \
        break;
#if GQ_NR > 3
#define GQ_CASES(s, q2)                                                                    \
    GQ_CASE(1, s, q2) GQ_CASE(2, s, q2) GQ_CASE(3, s, q2) GQ_CASE(4, s, q2)                \
    GQ_CASE(5, s, q2) GQ_CASE(6, s, q2) GQ_CASE(7, s, q2) GQ_CASE(8, s, q2)                \
    GQ_CASE(9, s, q2) GQ_CASE(10, s, q2) GQ_CASE(11, s, q2) GQ_CASE(12, s, q2)
#else
#define GQ_CASES(s, q2) GQ_CASE(1, s, q2) GQ_CASE(2, s, q2) GQ_CASE(3, s, q2)
#endif
    if (src->s16) {
        switch (nt) {
            GQ_CASES(1, 0)
        default:
            break;
        }
        return;
    }
    if (src->q2) {
        switch (nt) {
            GQ_CASES(0, 1)
        default:
            break;
        }
        return;
    }
    switch (nt) {
        GQ_CASES(0, 0)
    default:
        break;
    }
#undef GQ_CASES
#undef GQ_CASE
}

/* 8 vectors of 8 int32 lanes -> their 8 sums, in order (exact) */
SIMD_INLINE __m256i SIMD(hsum8x8)(const __m256i v[8])
{
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* The float side of decode for 16 rows, in gq_micro's order: their
 * exact block dots R (16, nq8; rows 0..15) are transposed into I (nq8, 16)
 * and meet the scales D and minimums M (nq, 16) block after block; y gets
 * the first nr. s16: R, I and D hold half blocks (2 nq of them), each
 * with its block's activation scale. q2: M (nq, 3, 16), gq_micro's Q2_K
 * minimums. */
static void SIMD(gq_decode_finish)(const int32_t *R, int32_t *I, const float *D, const float *M,
                                   const struct llm_qx16 *xq, int64_t nq, int zp, float *y, int nr,
                                   int s16, int q2)
{
    const int64_t nh = nq << s16, nq8 = (nh + 7) / 8 * 8;
    /* R (16, nq8) -> I (nq8, 16): 8 x 8 blocks through the float
     * transpose (bits moved, never changed) */
    for (int64_t k0 = 0; k0 < nq8; k0 += 8)
        for (int a = 0; a < 2; a++) {
            __m256 q[8];
            for (int i = 0; i < 8; i++)
                q[i] = _mm256_loadu_ps((const float *)(R + (8 * a + i) * nq8 + k0));
            SIMD(tr8)(q);
            for (int j = 0; j < 8; j++)
                _mm256_storeu_ps((float *)(I + (k0 + j) * 16 + 8 * a), q[j]);
        }
    SIMD(gqf) acc[GQ_H];
    for (int h = 0; h < GQ_H; h++)
#ifdef SIMD_AVX512
        acc[h] = _mm512_setzero_ps();
#else
        acc[h] = _mm256_setzero_ps();
#endif
    for (int64_t k = 0; k < nh; k++) {
        const struct llm_qx16 *b = xq + (k >> s16);
        for (int h = 0; h < GQ_H; h++) {
#ifdef SIMD_AVX512
            const __m512i iv = _mm512_loadu_si512((const void *)(I + k * 16));
            acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iv),
                                     _mm512_mul_ps(_mm512_loadu_ps(D + k * 16),
                                                   _mm512_set1_ps(b->d)),
                                     acc[h]);
            if (q2)
                acc[h] = SIMD(q2min)(acc[h], _mm512_loadu_ps(M + 3 * k * 16),
                                        _mm512_loadu_ps(M + (3 * k + 1) * 16),
                                        _mm512_loadu_ps(M + (3 * k + 2) * 16), b);
            else if (zp)
                acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(M + k * 16), _mm512_set1_ps(b->ds),
                                         acc[h]);
#else
            const __m256i iv = _mm256_loadu_si256((const __m256i *)(I + k * 16 + 8 * h));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iv),
                                     _mm256_mul_ps(_mm256_loadu_ps(D + k * 16 + 8 * h),
                                                   _mm256_set1_ps(b->d)),
                                     acc[h]);
            if (q2)
                acc[h] = SIMD(q2min)(acc[h], _mm256_loadu_ps(M + 3 * k * 16 + 8 * h),
                                        _mm256_loadu_ps(M + (3 * k + 1) * 16 + 8 * h),
                                        _mm256_loadu_ps(M + (3 * k + 2) * 16 + 8 * h), b);
            else if (zp)
                acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(M + k * 16 + 8 * h),
                                         _mm256_set1_ps(b->ds), acc[h]);
#endif
        }
    }
    float out[16];
#ifdef SIMD_AVX512
    _mm512_storeu_ps(out, acc[0]);
#else
    _mm256_storeu_ps(out, acc[0]);
    _mm256_storeu_ps(out + 8, acc[1]);
#endif
    memcpy(y, out, (size_t)nr * sizeof(float));
}

/* Decode (one token) of the rows that are not interleaved, in the int16
 * GEMM's arithmetic: each row is read once, in order, and each of its
 * blocks gives its exact int32 dot with the token's block (8 lanes, summed
 * 8 blocks at a time); the dots of 16 rows are then transposed into lanes
 * and meet the scales in gq_micro's float order, so that the bits are the
 * GEMM's. Scratch: R (16, nq8) and I (nq8, 16) int32, D, M (nq, 16), with
 * nq8 = nq rounded up to 8. fam, G, BB, hdr are constants after inlining. */
SIMD_INLINE void SIMD(gq_decode_rows)(const uint8_t *W, uint64_t rb, const struct llm_qx16 *xq,
                                      int64_t nq, int64_t ne0, float *y, int64_t r0, int64_t r1,
                                      int32_t *R, int32_t *I, float *D, float *M, int fam,
                                      int G, int BB, int hdr)
{
    const int64_t nq8 = (nq + 7) / 8 * 8;
    const int zp = FAM_ZP(fam);
    for (int64_t r = r0; r < r1; r += 16) {
        const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
        for (int i = 0; i < 16; i++) {
            if (i >= nr) {
                memset(R + i * nq8, 0, (size_t)nq8 * sizeof(int32_t));
                for (int64_t k = 0; k < nq; k++)
                    D[k * 16 + i] = M[k * 16 + i] = 0.0f;
                continue;
            }
            const uint8_t *row = W + (uint64_t)(r + i) * rb;
            for (int64_t k0 = 0; k0 < nq8; k0 += 8) {
                __m256i v[8];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    const int64_t k = k0 + j;
                    if (k >= nq) {
                        v[j] = _mm256_setzero_si256();
                        continue;
                    }
                    __m128 dm;
                    __m256i w0, w1;
                    SIMD(codes16)(row, k, ne0, fam, G, BB, hdr, &dm, &w0, &w1);
                    const struct llm_qx16 *b = xq + k;
                    const __m256i x0 = _mm256_loadu_si256((const __m256i *)b->qs);
                    const __m256i x1 = _mm256_loadu_si256((const __m256i *)(b->qs + 16));
                    __m256i d = fam == F_SYM4 ? _mm256_castsi128_si256(_mm_cvtsi32_si128(b->m8))
                                              : _mm256_setzero_si256();
#ifdef SIMD_AVX512
                    d = _mm256_dpwssd_epi32(d, w0, x0);
                    d = _mm256_dpwssd_epi32(d, w1, x1);
#else
                    d = _mm256_add_epi32(d, _mm256_madd_epi16(w0, x0));
                    d = _mm256_add_epi32(d, _mm256_madd_epi16(w1, x1));
#endif
                    v[j] = d;
                    D[k * 16 + i] = _mm_cvtss_f32(dm);
                    M[k * 16 + i] = zp ? _mm_cvtss_f32(_mm_movehdup_ps(dm)) : 0.0f;
                }
                _mm256_storeu_si256((__m256i *)(R + i * nq8 + k0), SIMD(hsum8x8)(v));
            }
        }
        SIMD(gq_decode_finish)(R, I, D, M, xq, nq, zp, y + r, nr, 0, 0);
    }
}

/* y[r] for r in [r0, r1) = W[r] . x, in the int16 GEMM's arithmetic */
static llm_status SIMD(gq_decode)(enum llm_type t, const uint8_t *W, uint64_t rb, const float *x,
                                  float *y, int64_t ne0, int64_t r0, int64_t r1)
{
    /* nh: the units of one scale each (gq_s16: half blocks) */
    const int64_t nq = (ne0 + 31) / 32, nh = nq << SIMD(gq_s16)(t), nh8 = (nh + 7) / 8 * 8;
    /* xq (nq), R and I (16 nh8 each), D (16 nh) and M (16 nq; gq_q2: 48 nq) */
    const int64_t nm = nq * (SIMD(gq_q2)(t) ? 3 : 1);
    const uint64_t bytes = (uint64_t)nq * sizeof(struct llm_qx16) + (uint64_t)nh8 * 128 +
                           (uint64_t)(nh + nm) * 64;
    uint8_t stack[24576], *buf = stack;
    if (bytes > sizeof stack) {
        buf = llm_malloc((size_t)bytes);
        if (!buf)
            return LLM_E_NOMEM;
    }
    struct llm_qx16 *xq = (struct llm_qx16 *)buf;
    int32_t *R = (int32_t *)(xq + nq), *I = R + 16 * nh8;
    float *D = (float *)(I + 16 * nh8), *M = D + 16 * nh;
    SIMD(quantize_x16)(x, ne0, xq);
    if (llm_kq_type(t))
        SIMD(kq_decode_rows)(t, W, rb, xq, nq, ne0, y, r0, r1, R, I, D, M);
    switch (t) {
#define GQ_DEC(T, FAM, G, BB, HDR)                                                          \
    case T:                                                                                 \
        SIMD(gq_decode_rows)(W, rb, xq, nq, ne0, y, r0, r1, R, I, D, M, FAM, G, BB, HDR); \
        break;
        GQ_DEC(LLM_TYPE_Q8_0, F_SYM8, 32, 34, 0)
        GQ_DEC(LLM_TYPE_Q8_G64, F_SYM8, 64, 66, 0)
        GQ_DEC(LLM_TYPE_Q8_G128, F_SYM8, 128, 130, 0)
        GQ_DEC(LLM_TYPE_Q8_CH, F_SYM8, 0, 1, 4)
        GQ_DEC(LLM_TYPE_Q8Z_G32, F_ZP8, 32, 36, 0)
        GQ_DEC(LLM_TYPE_Q8Z_G64, F_ZP8, 64, 68, 0)
        GQ_DEC(LLM_TYPE_Q8Z_G128, F_ZP8, 128, 132, 0)
        GQ_DEC(LLM_TYPE_Q8Z_CH, F_ZP8, 0, 1, 8)
        GQ_DEC(LLM_TYPE_Q4_0, F_SYM4, 32, 18, 0)
        GQ_DEC(LLM_TYPE_Q4_G64, F_SYM4, 64, 34, 0)
        GQ_DEC(LLM_TYPE_Q4_G128, F_SYM4, 128, 66, 0)
        GQ_DEC(LLM_TYPE_Q4_CH, F_SYM4, 32, 16, 4)
        GQ_DEC(LLM_TYPE_Q4_1, F_ZP4, 32, 20, 0)
        GQ_DEC(LLM_TYPE_Q4Z_G64, F_ZP4, 64, 36, 0)
        GQ_DEC(LLM_TYPE_Q4Z_G128, F_ZP4, 128, 68, 0)
        GQ_DEC(LLM_TYPE_Q4Z_CH, F_ZP4, 32, 16, 8)
        GQ_DEC(LLM_TYPE_Q3Z_G32, F_ZP3, 32, 16, 0)
        GQ_DEC(LLM_TYPE_Q3Z_G64, F_ZP3, 64, 28, 0)
        GQ_DEC(LLM_TYPE_Q3Z_G128, F_ZP3, 128, 52, 0)
        GQ_DEC(LLM_TYPE_Q3Z_CH, F_ZP3, 32, 12, 8)
#undef GQ_DEC
    default:
        break;
    }
    if (buf != stack)
        llm_free(buf);
    return LLM_OK;
}

/* Y[b*ldy + r] = W[r] . X[b] for b < nb, r in [r0, r1). x16: W is in
 * matmul.h's interleaved layout (rb unused; r0, r1 multiples of 16). */
static llm_status SIMD(gemm_q16)(enum llm_type t, const struct SIMD(shape) *sh, const uint8_t *W,
                                 uint64_t rb,
                                 const float *X, float *Y, int64_t ne0, int64_t nb, int64_t ldy,
                                 int64_t r0, int64_t r1, int x16)
{
    const int64_t nq = (ne0 + 31) / 32, nbc = nb < GQ_NBC ? nb : GQ_NBC;
    const int zp = FAM_ZP(sh->fam), s16 = SIMD(gq_s16)(t), q2 = SIMD(gq_q2)(t);
    /* one packed tile: (nq, 16, 16) int32, then (nq, 16) d (s16: (nq, 2,
     * 16)) and m (q2: (nq, 3, 16)) (1152 bytes a block: 28 KB for
     * 768-wide rows); activations (nbc, nq) */
    const int nm = q2 ? 3 : 1;
    const uint64_t tile = (uint64_t)nq * (256 * 4 + ((1 << s16) + nm) * 16 * 4);
    uint64_t xb;
    if (!llm_mul_ok((uint64_t)nbc * (uint64_t)nq, sizeof(struct llm_qx16), &xb) ||
        tile + xb + 64 < xb)
        return llm_error_set(LLM_E_NOMEM, "matmul: rows of %lld elements overflow",
                             (long long)ne0);
    uint8_t *buf = llm_malloc((size_t)(tile + xb + 64));
    if (!buf)
        return LLM_E_NOMEM;
    int32_t *P = (int32_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    float *D = (float *)(P + nq * 256), *M = D + (nq << s16) * 16;
    struct llm_qx16 *xq = (struct llm_qx16 *)(M + nq * nm * 16);
    /* interleaved groups are read in place, the rows packed a tile at a time */
    struct SIMD(gq_src) src = { .P = x16 ? NULL : P, .D = D, .M = M, .q8 = sh->fam == F_SYM8 ||
                                sh->fam == F_ZP8, .G = sh->G, .BB = sh->BB, .s16 = s16,
                                .q2 = q2 };
    /* a group of 16 interleaved rows (the K-quants: super-blocks of 256) */
    const int kq = llm_kq_type(t);
    const uint64_t gbytes = !x16 ? 0
                            : kq ? (uint64_t)(ne0 / 256) * 16 * llm_type_traits(t)->block_bytes
                                 : (uint64_t)(ne0 / sh->G) * 16 * (uint64_t)sh->BB;
    for (int64_t c0 = 0; c0 < nb; c0 += GQ_NBC) {
        const int64_t nc = nb - c0 < GQ_NBC ? nb - c0 : GQ_NBC;
        for (int64_t b = 0; b < nc; b++)
            SIMD(quantize_x16)(X + (c0 + b) * ne0, ne0, xq + b * nq);
        for (int64_t r = r0; r < r1; r += 16) {
            const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
            if (x16) {
                src.grp = W + (uint64_t)(r / 16) * gbytes;
                src.P = NULL;
                /* the next group into L2 while this one is computed: its
                 * first reads (the widening below) otherwise wait on memory,
                 * 17% of decode's time at 16 tokens */
                if (r + 16 < r1)
                    for (uint64_t o = 0; o < gbytes; o += 64)
                        _mm_prefetch((const char *)(src.grp + gbytes + o), _MM_HINT_T1);
                /* one micro-kernel call widens each block into L1 as it
                 * goes; widening the whole group first (tens of KB) made
                 * 2-4 tokens 20-28% slower, but pays from two calls on */
                if (kq) {
                    SIMD(x16_k_to_packed)(t, src.grp, ne0 / 256, P, D, M);
                    src.P = P;
                } else if (nc > GQ_NR) {
                    SIMD(gq_x16_to_packed)(&src, zp, nq, P, D, M);
                    src.P = P;
                }
            } else {
                SIMD(gq_pack)(t, W, rb, r, nr, ne0, nq, P, D, M);
            }
            /* calls of equal size (16 tokens: 8 + 8, not 12 + 4, whose
             * four accumulator chains wait on the dot product's latency) */
            const int64_t calls = (nc + GQ_NR - 1) / GQ_NR, per = (nc + calls - 1) / calls;
            for (int64_t b = 0; b < nc; b += per) {
                const int nt = nc - b < per ? (int)(nc - b) : (int)per;
                SIMD(gqf) out[GQ_NR][GQ_H];
                SIMD(gq_micro_n)(&src, zp, xq + b * nq, nq, nt, out);
                for (int j = 0; j < nt; j++) {
                    float *y = Y + (c0 + b + j) * ldy + r;
#ifdef SIMD_AVX512
                    _mm512_mask_storeu_ps(y, (__mmask16)((1u << nr) - 1), out[j][0]);
#else
                    if (nr == 16) {
                        _mm256_storeu_ps(y, out[j][0]);
                        _mm256_storeu_ps(y + 8, out[j][1]);
                    } else { /* rows past r1 are never touched */
                        float tmp[16];
                        _mm256_storeu_ps(tmp, out[j][0]);
                        _mm256_storeu_ps(tmp + 8, out[j][1]);
                        memcpy(y, tmp, (size_t)nr * sizeof(float));
                    }
#endif
                }
            }
        }
    }
    llm_free(buf);
    return LLM_OK;
}
