/* awq.c: AWQ's scale search, clip search, pseudo-quantizer and folding
 * (see awq.h and quantization.md section 2).
 *
 * Both searches are dominated by one product shape, C = A . B^T with A and
 * B row-major (k contiguous): the quantization error D of a block of
 * weight rows against the token sample X (loss = sum C^2), against the Gram
 * matrix G (loss = sum C .* D), and X^T X itself. llm_matmul computes that
 * shape for model weights, one dot product at a time (about 12 GFLOP/s
 * here); the searches run twenty of them per layer, so this file has its
 * own register-blocked kernel: B is packed once into panels of nr
 * transposed rows, and a tile of 6 rows of A by nr columns stays in
 * registers for the whole k loop, a broadcast FMA per element of A.
 * Panels are the outer loop, so a panel (k * nr floats) stays in L2 while
 * every row tile of the A block passes over it.
 */
#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../ops/matmul.h"
#include "awq.h"
#include "../quant/grid.h"
#include "../quant/kquants.h"
#include "../quant/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AWQ_X86 1
#endif

/* rows of A per register tile */
#define MR 6
/* widest panel (AVX-512: two vectors of 16) */
#define NR_MAX 32
/* weight rows per block in the scale search (a multiple of MR) */
#define SS_ROWS 60
/* weight rows per block in the clip search (times the candidates: a
 * multiple of MR) */
#define CL_ROWS 6

enum isa { ISA_C, ISA_AVX2, ISA_AVX512 };

/* The instruction set of the matrix products, the same choice as ops/
 * (llm_matmul_isa_name honours LLM_ISA). */
static enum isa isa_pick(void)
{
#ifdef AWQ_X86
    const char *n = llm_matmul_isa_name();
    if (strcmp(n, "avx512-vnni") == 0)
        return ISA_AVX512;
    if (strcmp(n, "avx2") == 0)
        return ISA_AVX2;
#endif
    return ISA_C;
}

// ----------------------------------------------------------------------------
// C = A . B^T

/* B (nb, k) packed as panels of nr rows, transposed: p[(q*k + i)*nr + j] =
 * B[q*nr + j][i], zero past nb. tri: B is a quadratic form's triangle
 * (rhs_pack_form), B[j][i] zero for i > j, so a panel's products stop at
 * its last column's i. */
struct rhs {
    float *p;
    int64_t nb, k;
    int nr, tri;
    enum isa isa;
};

static llm_status rhs_pack(struct rhs *b, const float *B, int64_t ldb, int64_t nb, int64_t k,
                           enum isa isa)
{
    b->isa = isa;
    b->tri = 0;
    b->nr = isa == ISA_AVX512 ? 32 : isa == ISA_AVX2 ? 16 : 8;
    b->nb = nb;
    b->k = k;
    const int64_t np = (nb + b->nr - 1) / b->nr;
    uint64_t cnt;
    if (!llm_mul_ok((uint64_t)np * (uint64_t)b->nr, (uint64_t)k, &cnt) || cnt > SIZE_MAX / 4)
        return llm_error_set(LLM_E_NOMEM, "awq: packed matrix of %lld x %lld is too large",
                             (long long)nb, (long long)k);
    b->p = llm_calloc(cnt ? cnt : 1, sizeof(float));
    if (!b->p)
        return LLM_E_NOMEM;
    const int nr = b->nr;
    for (int64_t q = 0; q < np; q++) {
        float *dst = b->p + q * k * nr;
        for (int j = 0; j < nr && q * nr + j < nb; j++) {
            const float *src = B + (q * nr + j) * ldb;
            for (int64_t i = 0; i < k; i++)
                dst[i * nr + j] = src[i];
        }
    }
    return LLM_OK;
}

/* The errors a G a^T of the searches through G (n, n; symmetric) with
 * half G's products: a G a^T = sum_j a_j (G_jj a_j + sum_{i<j} 2 G_ij a_i),
 * so B[j][i] = 2 G_ij for i < j, G_jj on the diagonal and 0 above it, and
 * gemm's EPI_DOT with R = A gives the sum. (The sums round differently
 * from the full product's, well within the searches' tolerance.) */
static llm_status rhs_pack_form(struct rhs *b, const float *G, int64_t ld, int64_t n,
                                enum isa isa)
{
    LLM_TRY(rhs_pack(b, G, ld, n, n, isa));
    b->tri = 1;
    const int nr = b->nr;
    for (int64_t q = 0; q < (n + nr - 1) / nr; q++)
        for (int64_t i = 0; i < n; i++) {
            float *row = b->p + (q * n + i) * nr; /* B[q*nr + jj][i] */
            for (int jj = 0; jj < nr; jj++) {
                const int64_t j = q * nr + jj;
                row[jj] = i < j ? 2.0f * row[jj] : i == j ? row[jj] : 0.0f;
            }
        }
    return LLM_OK;
}

static void rhs_free(struct rhs *b)
{
    llm_free(b->p);
    b->p = NULL;
}

/* T (mr, nr) = A (mr, k; row stride lda) . panel (k, nr), mr = MR or 1. */
static void tile_c(const float *A, int64_t lda, int mr, const float *P, int64_t k, float *T)
{
    enum { NR = 8 };
    float c[MR][NR] = { { 0 } };
    for (int64_t p = 0; p < k; p++)
        for (int i = 0; i < mr; i++) {
            const float a = A[i * lda + p];
            for (int j = 0; j < NR; j++)
                c[i][j] += a * P[p * NR + j];
        }
    for (int i = 0; i < mr; i++)
        memcpy(T + i * NR, c[i], sizeof c[i]);
}

#ifdef AWQ_X86
__attribute__((target("avx2,fma"))) static void tile_avx2(const float *A, int64_t lda, int mr,
                                                           const float *P, int64_t k, float *T)
{
    if (mr == MR) {
        __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
        __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
        for (int64_t p = 0; p < k; p++) {
            const __m256 b0 = _mm256_loadu_ps(P + p * 16), b1 = _mm256_loadu_ps(P + p * 16 + 8);
            __m256 a = _mm256_broadcast_ss(A + p);
            c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
            a = _mm256_broadcast_ss(A + lda + p);
            c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
            a = _mm256_broadcast_ss(A + 2 * lda + p);
            c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
            a = _mm256_broadcast_ss(A + 3 * lda + p);
            c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
            a = _mm256_broadcast_ss(A + 4 * lda + p);
            c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
            a = _mm256_broadcast_ss(A + 5 * lda + p);
            c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
        }
        _mm256_storeu_ps(T + 0, c00), _mm256_storeu_ps(T + 8, c01);
        _mm256_storeu_ps(T + 16, c10), _mm256_storeu_ps(T + 24, c11);
        _mm256_storeu_ps(T + 32, c20), _mm256_storeu_ps(T + 40, c21);
        _mm256_storeu_ps(T + 48, c30), _mm256_storeu_ps(T + 56, c31);
        _mm256_storeu_ps(T + 64, c40), _mm256_storeu_ps(T + 72, c41);
        _mm256_storeu_ps(T + 80, c50), _mm256_storeu_ps(T + 88, c51);
        return;
    }
    __m256 c0 = _mm256_setzero_ps(), c1 = c0;
    for (int64_t p = 0; p < k; p++) {
        const __m256 a = _mm256_broadcast_ss(A + p);
        c0 = _mm256_fmadd_ps(a, _mm256_loadu_ps(P + p * 16), c0);
        c1 = _mm256_fmadd_ps(a, _mm256_loadu_ps(P + p * 16 + 8), c1);
    }
    _mm256_storeu_ps(T, c0), _mm256_storeu_ps(T + 8, c1);
}

__attribute__((target("avx512f,fma"))) static void tile_avx512(const float *A, int64_t lda,
                                                               int mr, const float *P, int64_t k,
                                                               float *T)
{
    if (mr == MR) {
        __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
        __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
        for (int64_t p = 0; p < k; p++) {
            const __m512 b0 = _mm512_loadu_ps(P + p * 32), b1 = _mm512_loadu_ps(P + p * 32 + 16);
            __m512 a = _mm512_set1_ps(A[p]);
            c00 = _mm512_fmadd_ps(a, b0, c00), c01 = _mm512_fmadd_ps(a, b1, c01);
            a = _mm512_set1_ps(A[lda + p]);
            c10 = _mm512_fmadd_ps(a, b0, c10), c11 = _mm512_fmadd_ps(a, b1, c11);
            a = _mm512_set1_ps(A[2 * lda + p]);
            c20 = _mm512_fmadd_ps(a, b0, c20), c21 = _mm512_fmadd_ps(a, b1, c21);
            a = _mm512_set1_ps(A[3 * lda + p]);
            c30 = _mm512_fmadd_ps(a, b0, c30), c31 = _mm512_fmadd_ps(a, b1, c31);
            a = _mm512_set1_ps(A[4 * lda + p]);
            c40 = _mm512_fmadd_ps(a, b0, c40), c41 = _mm512_fmadd_ps(a, b1, c41);
            a = _mm512_set1_ps(A[5 * lda + p]);
            c50 = _mm512_fmadd_ps(a, b0, c50), c51 = _mm512_fmadd_ps(a, b1, c51);
        }
        _mm512_storeu_ps(T + 0, c00), _mm512_storeu_ps(T + 16, c01);
        _mm512_storeu_ps(T + 32, c10), _mm512_storeu_ps(T + 48, c11);
        _mm512_storeu_ps(T + 64, c20), _mm512_storeu_ps(T + 80, c21);
        _mm512_storeu_ps(T + 96, c30), _mm512_storeu_ps(T + 112, c31);
        _mm512_storeu_ps(T + 128, c40), _mm512_storeu_ps(T + 144, c41);
        _mm512_storeu_ps(T + 160, c50), _mm512_storeu_ps(T + 176, c51);
        return;
    }
    __m512 c0 = _mm512_setzero_ps(), c1 = c0;
    for (int64_t p = 0; p < k; p++) {
        const __m512 a = _mm512_set1_ps(A[p]);
        c0 = _mm512_fmadd_ps(a, _mm512_loadu_ps(P + p * 32), c0);
        c1 = _mm512_fmadd_ps(a, _mm512_loadu_ps(P + p * 32 + 16), c1);
    }
    _mm512_storeu_ps(T, c0), _mm512_storeu_ps(T + 16, c1);
}
#endif

static void tile(enum isa isa, const float *A, int64_t lda, int mr, const float *P, int64_t k,
                 float *T)
{
#ifdef AWQ_X86
    if (isa == ISA_AVX512) {
        tile_avx512(A, lda, mr, P, k, T);
        return;
    }
    if (isa == ISA_AVX2) {
        tile_avx2(A, lda, mr, P, k, T);
        return;
    }
#endif
    (void)isa;
    tile_c(A, lda, mr, P, k, T);
}

enum epi {
    EPI_STORE, /* C (m, ldc) = A . B^T */
    EPI_SUMSQ, /* out[i] += sum_j (A . B^T)[i][j]^2 */
    EPI_DOT,   /* out[i] += sum_j (A . B^T)[i][j] * R[i][j] (R (m, ldr)) */
};

/* A (m, b->k; row stride lda) against the packed b, by epilogue e. */
static void gemm(const struct rhs *b, const float *A, int64_t lda, int64_t m, enum epi e, float *C,
                 int64_t ldc, const float *R, int64_t ldr, double *out)
{
    float T[MR * NR_MAX];
    const int nr = b->nr;
    const int64_t np = (b->nb + nr - 1) / nr;
    for (int64_t q = 0; q < np; q++) {
        const float *P = b->p + q * b->k * nr;
        const int64_t j0 = q * nr;
        const int nj = (int)(b->nb - j0 < nr ? b->nb - j0 : nr);
        /* a triangle's panel is zero past its last column's row */
        const int64_t k = b->tri && j0 + nj < b->k ? j0 + nj : b->k;
        for (int64_t i0 = 0; i0 < m;) {
            const int mr = m - i0 >= MR ? MR : 1;
            tile(b->isa, A + i0 * lda, lda, mr, P, k, T);
            for (int i = 0; i < mr; i++) {
                const float *t = T + i * nr;
                if (e == EPI_STORE) {
                    memcpy(C + (i0 + i) * ldc + j0, t, (size_t)nj * sizeof(float));
                    continue;
                }
                float acc = 0.0f;
                if (e == EPI_SUMSQ)
                    for (int j = 0; j < nj; j++)
                        acc += t[j] * t[j];
                else
                    for (int j = 0; j < nj; j++)
                        acc += t[j] * R[(i0 + i) * ldr + j0 + j];
                out[i0 + i] += acc;
            }
            i0 += mr;
        }
    }
}

// ----------------------------------------------------------------------------
// threads

/* fn(i, n, ctx) on n_threads threads (the caller is one of them). */
static llm_status run_threads(int n_threads, void (*fn)(int, int, void *), void *ctx)
{
    if (n_threads <= 1) {
        fn(0, 1, ctx);
        return LLM_OK;
    }
    struct llm_pool *pool;
    LLM_TRY(llm_pool_new(&pool, n_threads));
    llm_pool_run(pool, fn, ctx);
    llm_pool_free(pool);
    return LLM_OK;
}

static void split(int64_t total, int i, int n, int64_t *lo, int64_t *hi)
{
    *lo = total * i / n;
    *hi = total * (i + 1) / n;
}

// ----------------------------------------------------------------------------
// pseudo-quantization

static int64_t group_len(const struct llm_qgrid *g, int64_t cols)
{
    return g->group ? g->group : cols;
}

/* llm_qgrid_value(g, p, llm_qgrid_code(g, p, x)), restated here so that
 * the searches' inner loop (a third of their time through the calls) can
 * be inlined; test_awq's fake_quant test holds it equal to grid.c's packing
 * and dequantization. Rounding: r is clamped to |r| <= maxq + 1 < 2^22, where
 * adding and subtracting 1.5 * 2^23 rounds to nearest even as nearbyintf. */
static inline float fq_one(const struct llm_qgrid *g, const struct llm_qgroup *p, float x)
{
    float r = x / p->d;
    int q = p->zero;
    if (!isnan(r)) {
        const float lim = (float)(g->maxq + 1);
        r = r < -lim ? -lim : (r > lim ? lim : r);
        q += (int)((r + 0x1.8p23f) - 0x1.8p23f); /* not reassociated without -ffast-math */
        q = q < 0 ? 0 : (q > g->maxq ? g->maxq : q);
    }
    if (!g->zero_point)
        return (float)(q - p->zero) * p->d;
    const float prod = (float)q * p->d; /* one product, then one sum: quant.c's rule */
    return prod + p->m;
}

/* A GGUF block type (q4_k ...; quant/kquants.h) as AWQ's grid: its
 * blocks are the groups, and a group is pseudo-quantized by the type's own
 * round-to-nearest quantizer (which fits its block's scales itself),
 * weighted by the columns' mean squared inputs where they are known (as
 * llama.cpp's imatrix: without it AWQ on these grids trailed plain
 * importance-weighted rounding). */
static llm_status grid_of(enum llm_type t, struct llm_qgrid *g)
{
    if (!llm_kq_type(t))
        return llm_qgrid_of(t, g);
    memset(g, 0, sizeof *g);
    g->type = t;
    g->group = (int)llm_type_traits(t)->blck;
    return LLM_OK;
}

/* w (n) = value(code(w)) on one group's AWQ grid; imp (n): the GGUF block
 * types' importance of its columns, or NULL. */
static void fq_group(const struct llm_qgrid *g, float *w, int64_t n, const float *imp)
{
    if (llm_kq_type(g->type)) { /* n is one block: at most 256 */
        uint8_t blk[292];
        if (n == g->group && llm_kq_quantize_row(g->type, w, blk, n, imp) == LLM_OK)
            llm_dequantize_row(g->type, blk, w, n);
        return;
    }
    struct llm_qgroup p;
    llm_qgrid_group_awq(g, w, n, &p);
    for (int64_t i = 0; i < n; i++)
        w[i] = fq_one(g, &p, w[i]);
}

static void fq_row(const struct llm_qgrid *g, float *w, int64_t cols, const float *imp)
{
    const int64_t gl = group_len(g, cols);
    for (int64_t c0 = 0; c0 < cols; c0 += gl)
        fq_group(g, w + c0, cols - c0 < gl ? cols - c0 : gl, imp ? imp + c0 : NULL);
}

#ifdef AWQ_X86
/* the first min(left, 16) lanes */
static inline __mmask16 lanes16(int64_t left)
{
    return (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
}

/* ss_worker's three steps for one candidate's row on an integer grid,
 * 16 lanes at a time: d = w s; each group's range and AWQ grid
 * (llm_qgrid_group_awq), then d = fq_one(d); d = w - d / s. Every step is
 * the scalar code's element-wise IEEE operation, so the bits are the same.
 * The range alone is reduced in another order: its least or greatest
 * value may come out as +0 where the scalar loop keeps -0 (or the
 * reverse), which AWQ's scale and zero do not see (grid.c raw_awq). */
__attribute__((target("avx512f"))) static void cand_row_avx512(const struct llm_qgrid *g,
                                                               const float *w, const float *s,
                                                               float *d, int64_t cols)
{
    const int64_t gl = group_len(g, cols);
    const __m512 inf = _mm512_set1_ps(INFINITY), magic = _mm512_set1_ps(0x1.8p23f);
    const __m512 lim = _mm512_set1_ps((float)(g->maxq + 1));
    const __m512 nlim = _mm512_set1_ps(-(float)(g->maxq + 1));
    const __m512i qmax = _mm512_set1_epi32(g->maxq), qmin = _mm512_setzero_si512();
    for (int64_t c0 = 0; c0 < cols; c0 += gl) {
        const int64_t n = cols - c0 < gl ? cols - c0 : gl;
        __m512 lo = inf, hi = _mm512_set1_ps(-INFINITY);
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 k = lanes16(n - i);
            const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + c0 + i),
                                           _mm512_maskz_loadu_ps(k, s + c0 + i));
            _mm512_mask_storeu_ps(d + c0 + i, k, x);
            /* the finite values: |x| < inf, ordered */
            const __mmask16 f = _mm512_mask_cmp_ps_mask(k, _mm512_abs_ps(x), inf, _CMP_LT_OQ);
            lo = _mm512_mask_min_ps(lo, f, lo, x);
            hi = _mm512_mask_max_ps(hi, f, hi, x);
        }
        struct llm_qgroup p;
        llm_qgrid_group_awq_range(g, _mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi), &p);
        const __m512 vd = _mm512_set1_ps(p.d), vm = _mm512_set1_ps(p.m);
        const __m512i z = _mm512_set1_epi32(p.zero);
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 k = lanes16(n - i);
            const __m512 r = _mm512_div_ps(_mm512_maskz_loadu_ps(k, d + c0 + i), vd);
            const __mmask16 num = _mm512_cmp_ps_mask(r, r, _CMP_ORD_Q); /* not NaN */
            const __m512 rc = _mm512_min_ps(_mm512_max_ps(r, nlim), lim);
            const __m512 rr = _mm512_sub_ps(_mm512_add_ps(rc, magic), magic);
            __m512i q = _mm512_add_epi32(z, _mm512_cvttps_epi32(rr));
            q = _mm512_min_epi32(_mm512_max_epi32(q, qmin), qmax);
            q = _mm512_mask_mov_epi32(z, num, q); /* NaN: the zero, unclamped */
            const __m512 v =
                g->zero_point
                    ? _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q), vd), vm)
                    : _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, z)), vd);
            const __m512 e = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, w + c0 + i),
                                           _mm512_div_ps(v, _mm512_maskz_loadu_ps(k, s + c0 + i)));
            _mm512_mask_storeu_ps(d + c0 + i, k, e);
        }
    }
}
#endif

/* d (cols) = w - Q(w s) / s: a scale candidate's error row (imp: the GGUF
 * block types' importance, or NULL); vec: by cand_row_avx512 (an integer
 * grid, imp NULL). */
static void cand_row(const struct llm_qgrid *g, const float *w, const float *s, float *d,
                     int64_t cols, const float *imp, int vec)
{
#ifdef AWQ_X86
    if (vec) {
        cand_row_avx512(g, w, s, d, cols);
        return;
    }
#endif
    (void)vec;
    for (int64_t i = 0; i < cols; i++)
        d[i] = w[i] * s[i];
    fq_row(g, d, cols, imp);
    for (int64_t i = 0; i < cols; i++)
        d[i] = w[i] - d[i] / s[i];
}

/* AVX-512 and an integer grid: cand_row's vector form applies */
static int cand_vec(const struct llm_qgrid *g, enum isa isa)
{
    return isa == ISA_AVX512 && !llm_kq_type(g->type) && !g->fp8;
}

llm_status llm_awq_candidate_row(enum llm_type t, const float *w, const float *s, float *d,
                                 int64_t cols, int vec)
{
    struct llm_qgrid g;
    LLM_TRY(grid_of(t, &g));
    LLM_CHECK(w && s && d && cols >= 1, LLM_E_INVALID, "awq: candidate row: bad arguments");
    if (vec && !cand_vec(&g, isa_pick()))
        return llm_error_set(LLM_E_UNSUPPORTED, "awq: candidate rows of %s: no vector form "
                             "on this CPU", llm_type_name(t));
    cand_row(&g, w, s, d, cols, NULL, vec);
    return LLM_OK;
}

static llm_status check_shape(const char *what, int64_t rows, int64_t cols)
{
    uint64_t n;
    LLM_CHECK(rows >= 1 && cols >= 1, LLM_E_INVALID, "awq: %s: bad shape %lld x %lld", what,
              (long long)rows, (long long)cols);
    LLM_CHECK(llm_mul_ok((uint64_t)rows, (uint64_t)cols, &n) && n <= SIZE_MAX / 8, LLM_E_INVALID,
              "awq: %s: shape %lld x %lld is too large", what, (long long)rows, (long long)cols);
    return LLM_OK;
}

llm_status llm_awq_fake_quant(enum llm_type t, float *W, int64_t rows, int64_t cols)
{
    struct llm_qgrid g;
    LLM_TRY(grid_of(t, &g));
    LLM_TRY(check_shape("fake_quant", rows, cols));
    LLM_CHECK(W, LLM_E_INVALID, "awq: fake_quant: no weights");
    for (int64_t r = 0; r < rows; r++)
        fq_row(&g, W + r * cols, cols, NULL);
    return LLM_OK;
}

// ----------------------------------------------------------------------------
// scale search

struct ss_ctx {
    const struct llm_qgrid *g;
    int64_t cols;
    int n_w;
    const float *const *W;
    const int64_t *rows;
    int64_t total;          /* sum of rows */
    int n_cand;
    const float *S;         /* (n_cand, cols) candidate scales */
    const float *IMP;       /* (n_cand, cols) the scaled columns' mean squared inputs, or NULL */
    const struct rhs *b;    /* X (direct) or G (gram) */
    int gram;
    float *scratch;         /* (n_threads, SS_ROWS, cols) */
    double *part;           /* (n_threads, n_cand, n_w) sums of squares */
};

static void ss_worker(int ti, int nt, void *arg)
{
    struct ss_ctx *c = arg;
    const int64_t cols = c->cols;
    const int vec = cand_vec(c->g, c->b->isa);
    float *D = c->scratch + (int64_t)ti * SS_ROWS * cols; // (SS_ROWS, cols)
    double *part = c->part + (int64_t)ti * c->n_cand * c->n_w;
    double out[SS_ROWS];
    int64_t lo, hi;
    split(c->total, ti, nt, &lo, &hi);
    int64_t base = 0;
    for (int j = 0; j < c->n_w; base += c->rows[j], j++) {
        int64_t r0 = lo > base ? lo - base : 0;
        const int64_t r1 = hi - base < c->rows[j] ? hi - base : c->rows[j];
        for (; r0 < r1; r0 += SS_ROWS) {
            const int64_t mb = r1 - r0 < SS_ROWS ? r1 - r0 : SS_ROWS;
            const float *w = c->W[j] + r0 * cols;
            for (int k = 0; k < c->n_cand; k++) {
                const float *s = c->S + (int64_t)k * cols;
                // D = W - Q(W s) / s, the error the scaled linear adds to X W^T
                for (int64_t r = 0; r < mb; r++) {
                    float *d = D + r * cols;
                    const float *wr = w + r * cols;
                    cand_row(c->g, wr, s, d, cols, c->IMP ? c->IMP + (int64_t)k * cols : NULL,
                             vec);
                }
                memset(out, 0, sizeof out);
                gemm(c->b, D, cols, mb, c->gram ? EPI_DOT : EPI_SUMSQ, NULL, 0, D, cols, out);
                double sum = 0.0;
                for (int64_t r = 0; r < mb; r++)
                    sum += out[r];
                part[k * c->n_w + j] += sum;
            }
        }
    }
}

/* w_mean (cols): mean over every row of |w| / (its group's max |w| + 1e-6). */
static void w_mean_of(const struct llm_qgrid *g, int n_w, const float *const *W,
                      const int64_t *rows, int64_t cols, double *acc, float *w_mean)
{
    const int64_t gl = group_len(g, cols);
    int64_t total = 0;
    memset(acc, 0, (size_t)cols * sizeof *acc);
    for (int j = 0; j < n_w; j++) {
        total += rows[j];
        for (int64_t r = 0; r < rows[j]; r++) {
            const float *w = W[j] + r * cols;
            for (int64_t c0 = 0; c0 < cols; c0 += gl) {
                const int64_t n = cols - c0 < gl ? cols - c0 : gl;
                float amax = 0.0f;
                for (int64_t i = 0; i < n; i++)
                    amax = fmaxf(amax, fabsf(w[c0 + i]));
                const float den = amax + 1e-6f;
                for (int64_t i = 0; i < n; i++)
                    acc[c0 + i] += fabsf(w[c0 + i]) / den;
            }
        }
    }
    for (int64_t i = 0; i < cols; i++)
        w_mean[i] = (float)(acc[i] / (double)total);
}

/* The candidate s (cols) at alpha (beta = 1 - alpha), normalised as the reference does (float32
 * throughout, NaN propagating through max/min as torch's do). */
static void scale_at(const float *x_mean, const float *w_mean, int64_t cols, float alpha,
                     float beta, float *s)
{
    float mx = -INFINITY, mn = INFINITY;
    int nan = 0;
    for (int64_t i = 0; i < cols; i++) {
        float v = powf(x_mean[i], alpha);
        if (w_mean)
            v = v / (powf(w_mean[i], beta) + 1e-4f);
        if (!(v >= 1e-4f) && !isnan(v))
            v = 1e-4f;
        nan |= isnan(v);
        mx = v > mx ? v : mx;
        mn = v < mn ? v : mn;
        s[i] = v;
    }
    const float norm = nan ? NAN : sqrtf(mx * mn);
    for (int64_t i = 0; i < cols; i++) {
        const float v = s[i] / norm;
        s[i] = isfinite(v) ? v : 1.0f; /* AutoAWQ: "avoid scaling values that overflow" */
    }
}

static llm_status search_scale(const struct llm_qgrid *g, const struct rhs *b, int gram,
                               double n_tok, int64_t cols, const float *x_mean, const float *xsq,
                               int n_w,
                               const float *const *W, const int64_t *rows, int n_grid, int duo,
                               float *s, struct llm_awq_scale_result *r, double *history,
                               int n_threads)
{
    /* candidate 0: plain RTN; candidates 1..n_grid: the grid (under plain
     * scaling the first grid point is s = 1 already, but computing it twice
     * keeps one code path for a 5 % cost); duo 2: the grid with the
     * weights' term, then without it */
    const int forms = duo == 2 ? 2 : 1, n_cand = forms * n_grid + 1;
    int64_t total = 0;
    for (int j = 0; j < n_w; j++)
        total += rows[j];
    if (n_threads > total)
        n_threads = (int)(total < 1 ? 1 : total);
    llm_status st = LLM_E_NOMEM;
    float *S = llm_malloc((size_t)n_cand * (size_t)cols * sizeof(float));
    float *w_mean = llm_malloc((size_t)cols * sizeof(float));
    double *acc = llm_malloc((size_t)cols * sizeof(double));
    float *scratch = llm_malloc((size_t)n_threads * SS_ROWS * (size_t)cols * sizeof(float));
    double *part = llm_calloc((size_t)n_threads * (size_t)n_cand * (size_t)n_w, sizeof(double));
    /* a GGUF block type weighs its columns by their inputs, scaled as s scales them */
    float *IMP = xsq && llm_kq_type(g->type)
                     ? llm_malloc((size_t)n_cand * (size_t)cols * sizeof(float)) : NULL;
    if (!S || !w_mean || !acc || !scratch || !part || (xsq && llm_kq_type(g->type) && !IMP))
        goto done;
    if (duo)
        w_mean_of(g, n_w, W, rows, cols, acc, w_mean);
    for (int64_t i = 0; i < cols; i++)
        S[i] = 1.0f;
    for (int k = 0; k < forms * n_grid; k++)
        scale_at(x_mean, duo && k < n_grid ? w_mean : NULL, cols,
                 (float)((double)(k % n_grid) / n_grid),
                 (float)(1.0 - (double)(k % n_grid) / n_grid), S + (k + 1) * cols);
    for (int64_t k = 0; IMP && k < n_cand; k++)
        for (int64_t i = 0; i < cols; i++)
            IMP[k * cols + i] = xsq[i] / (S[k * cols + i] * S[k * cols + i]);
    struct ss_ctx c = { .g = g, .cols = cols, .n_w = n_w, .W = W, .rows = rows, .total = total,
                        .n_cand = n_cand, .S = S, .IMP = IMP, .b = b, .gram = gram,
                        .scratch = scratch, .part = part };
    if ((st = run_threads(n_threads, ss_worker, &c)) != LLM_OK)
        goto done;
    int best = -1;
    double best_loss = INFINITY;
    for (int k = 0; k < n_cand; k++) {
        double loss = 0.0;
        for (int j = 0; j < n_w; j++) {
            double sum = 0.0;
            for (int t = 0; t < n_threads; t++)
                sum += part[((int64_t)t * n_cand + k) * n_w + j];
            loss += sum / (n_tok * (double)rows[j]);
        }
        if (k == 0) {
            r->loss_before = loss;
            continue;
        }
        if (history && k <= n_grid)
            history[k - 1] = loss;
        if (best < 0 || loss < best_loss)
            best = k, best_loss = loss;
    }
    r->ratio = (float)((best - 1) % n_grid) / (float)n_grid;
    r->duo = duo == 1 || (duo == 2 && best <= n_grid);
    r->loss_best = best_loss;
    memcpy(s, S + (int64_t)best * cols, (size_t)cols * sizeof(float));
    st = LLM_OK;
done:
    llm_free(S);
    llm_free(IMP);
    llm_free(w_mean);
    llm_free(acc);
    llm_free(scratch);
    llm_free(part);
    return st;
}

static llm_status check_search(enum llm_type t, struct llm_qgrid *g, int64_t cols,
                               const float *x_mean, int n_w, const float *const *W,
                               const int64_t *rows, int n_grid, int duo, float *s,
                               struct llm_awq_scale_result *r, int n_threads)
{
    LLM_TRY(grid_of(t, g));
    LLM_CHECK(x_mean && W && rows && s && r, LLM_E_INVALID, "awq: scale search: missing buffer");
    LLM_CHECK(n_w >= 1 && n_grid >= 1 && n_grid <= 1000 && n_threads >= 1, LLM_E_INVALID,
              "awq: scale search: n_w %d, n_grid %d (at most 1000), n_threads %d must be >= 1",
              n_w, n_grid, n_threads);
    LLM_CHECK(duo >= 0 && duo <= 2, LLM_E_INVALID, "awq: scale search: duo_scaling %d (0, 1, 2)",
              duo);
    int64_t total = 0;
    for (int j = 0; j < n_w; j++) {
        LLM_CHECK(W[j], LLM_E_INVALID, "awq: scale search: weight %d missing", j);
        LLM_TRY(check_shape("scale search weight", rows[j], cols));
        LLM_CHECK(!__builtin_add_overflow(total, rows[j], &total), LLM_E_INVALID,
                  "awq: scale search: too many rows");
    }
    for (int64_t i = 0; i < cols; i++)
        LLM_CHECK(isfinite(x_mean[i]) && x_mean[i] >= 0.0f, LLM_E_INVALID,
                  "awq: scale search: x_mean[%lld] = %g is not a finite mean |x|", (long long)i,
                  (double)x_mean[i]);
    return LLM_OK;
}

/* G (cols, cols) = X^T X for X (n, cols), split over threads by rows of G. */
struct gram_ctx {
    const struct rhs *b;
    const float *XT; // (cols, n)
    float *G;
    int64_t cols, n;
};

static void gram_worker(int ti, int nt, void *arg)
{
    struct gram_ctx *c = arg;
    int64_t lo, hi;
    split(c->cols, ti, nt, &lo, &hi);
    if (hi > lo)
        gemm(c->b, c->XT + lo * c->n, c->n, hi - lo, EPI_STORE, c->G + lo * c->cols, c->cols, NULL,
             0, NULL);
}

/* G (len, len) = X_k^T X_k for the columns [c0, c0 + len) of X (n, ld);
 * XT: scratch (len, n). */
static llm_status gram_of(const float *X, int64_t n, int64_t ld, int64_t c0, int64_t len,
                          enum isa isa, int n_threads, float *XT, float *G)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < len; c++)
            XT[c * n + i] = X[i * ld + c0 + c];
    struct rhs b;
    LLM_TRY(rhs_pack(&b, XT, n, len, n, isa));
    struct gram_ctx gc = { .b = &b, .XT = XT, .G = G, .cols = len, .n = n };
    llm_status st = run_threads(n_threads < len ? n_threads : (int)len, gram_worker, &gc);
    rhs_free(&b);
    return st;
}

/* xsq (cols): the inputs' mean squares, G's (cols, cols) diagonal over n tokens */
static void mean_squares(const float *G, int64_t cols, int64_t n, float *xsq)
{
    for (int64_t j = 0; j < cols; j++)
        xsq[j] = G[j * cols + j] / (float)n;
}

llm_status llm_awq_search_scale(enum llm_type t, const float *X, int64_t n, int64_t cols,
                                const float *x_mean, int n_w, const float *const *W,
                                const int64_t *rows, int n_grid, int duo_scaling, float *s,
                                struct llm_awq_scale_result *r, double *history, int n_threads)
{
    struct llm_qgrid g;
    LLM_TRY(check_search(t, &g, cols, x_mean, n_w, W, rows, n_grid, duo_scaling, s, r, n_threads));
    LLM_CHECK(X, LLM_E_INVALID, "awq: scale search: no tokens");
    LLM_TRY(check_shape("scale search tokens", n, cols));
    int64_t total = 0;
    for (int j = 0; j < n_w; j++)
        total += rows[j];
    /* per grid point: direct costs total*n*cols, through G total*cols^2,
     * plus cols^2*n once to form G */
    const double cand = n_grid + 1;
    const int gram = cand * (double)total * (double)cols + (double)cols * (double)n <
                     cand * (double)total * (double)n;
    const enum isa isa = isa_pick();
    struct rhs b = { 0 };
    llm_status st;
    if (!gram) {
        float *xsq = llm_kq_type(t) ? llm_calloc((size_t)cols, sizeof(float)) : NULL;
        if (llm_kq_type(t) && !xsq)
            return LLM_E_NOMEM;
        for (int64_t i = 0; xsq && i < n; i++)
            for (int64_t j = 0; j < cols; j++)
                xsq[j] += X[i * cols + j] * X[i * cols + j] / (float)n;
        st = rhs_pack(&b, X, cols, n, cols, isa);
        if (!st)
            st = search_scale(&g, &b, 0, (double)n, cols, x_mean, xsq, n_w, W, rows, n_grid,
                              duo_scaling, s, r, history, n_threads);
        rhs_free(&b);
        llm_free(xsq);
        return st;
    }
    st = LLM_E_NOMEM;
    float *XT = llm_malloc((size_t)n * (size_t)cols * sizeof(float));
    float *G = llm_malloc((size_t)cols * (size_t)cols * sizeof(float));
    if (!XT || !G)
        goto done;
    if ((st = gram_of(X, n, cols, 0, cols, isa, n_threads, XT, G)) != LLM_OK)
        goto done;
    if ((st = rhs_pack_form(&b, G, cols, cols, isa)) != LLM_OK)
        goto done;
    mean_squares(G, cols, n, XT); /* XT is free now: (cols) of it */
    st = search_scale(&g, &b, 1, (double)n, cols, x_mean, XT, n_w, W, rows, n_grid, duo_scaling,
                      s, r, history, n_threads);
done:
    rhs_free(&b);
    llm_free(XT);
    llm_free(G);
    return st;
}

llm_status llm_awq_search_scale_gram(enum llm_type t, const float *G, int64_t n_tok,
                                     int64_t cols, const float *x_mean, int n_w,
                                     const float *const *W, const int64_t *rows, int n_grid,
                                     int duo_scaling, float *s, struct llm_awq_scale_result *r,
                                     double *history, int n_threads)
{
    struct llm_qgrid g;
    LLM_TRY(check_search(t, &g, cols, x_mean, n_w, W, rows, n_grid, duo_scaling, s, r, n_threads));
    LLM_CHECK(G && n_tok >= 1, LLM_E_INVALID, "awq: scale search: no Gram matrix (%lld tokens)",
              (long long)n_tok);
    LLM_TRY(check_shape("scale search Gram matrix", cols, cols));
    float *xsq = llm_malloc((size_t)cols * sizeof(float));
    if (!xsq)
        return LLM_E_NOMEM;
    mean_squares(G, cols, n_tok, xsq);
    struct rhs b;
    llm_status st = rhs_pack_form(&b, G, cols, cols, isa_pick());
    if (!st)
        st = search_scale(&g, &b, 1, (double)n_tok, cols, x_mean, xsq, n_w, W, rows, n_grid,
                          duo_scaling, s, r, history, n_threads);
    rhs_free(&b);
    llm_free(xsq);
    return st;
}

// ----------------------------------------------------------------------------
// clip search

struct cl_ctx {
    const struct llm_qgrid *g;
    const struct rhs *b; // (n_groups): each group's Gram matrix over the tokens, packed
    const float *imp;    // (cols) the columns' summed squared inputs (GGUF block types), or NULL
    float *W;
    int64_t rows, cols, gl, n_groups, n;
    int n_grid, n_cand;
    float *scratch;      // (n_threads, CL_ROWS * n_cand, gl)
    double *err;         // (n_threads, 2): before, after
};

static void cl_worker(int ti, int nt, void *arg)
{
    struct cl_ctx *c = arg;
    const int nc = c->n_cand;
    const int64_t gl = c->gl;
    float *A = c->scratch + (int64_t)ti * CL_ROWS * nc * gl; // (CL_ROWS * nc, gl)
    double out[CL_ROWS * 64];                                  // n_cand <= 64
    float mv[CL_ROWS * 64];
    double before = 0.0, after = 0.0;
    int64_t lo, hi;
    split(c->rows, ti, nt, &lo, &hi);
    for (int64_t k = 0; k < c->n_groups; k++) {
        const int64_t c0 = k * gl;
        const int64_t len = c->cols - c0 < gl ? c->cols - c0 : gl;
        for (int64_t r0 = lo; r0 < hi; r0 += CL_ROWS) {
            const int64_t mb = hi - r0 < CL_ROWS ? hi - r0 : CL_ROWS;
            for (int64_t r = 0; r < mb; r++) {
                const float *w = c->W + (r0 + r) * c->cols + c0;
                float org = 0.0f;
                for (int64_t i = 0; i < len; i++)
                    org = fmaxf(org, fabsf(w[i]));
                for (int q = 0; q < nc; q++) {
                    const float m = org * (float)(1.0 - (double)q / c->n_grid);
                    float *a = A + (r * nc + q) * len;
                    for (int64_t i = 0; i < len; i++)
                        a[i] = w[i] < -m ? -m : (w[i] > m ? m : w[i]);
                    fq_group(c->g, a, len, c->imp ? c->imp + c0 : NULL);
                    for (int64_t i = 0; i < len; i++)
                        a[i] -= w[i];
                    mv[r * nc + q] = m;
                }
            }
            memset(out, 0, sizeof out);
            /* each candidate's sum over the tokens of (a . x)^2, as a G_k a^T */
            gemm(&c->b[k], A, len, mb * nc, EPI_DOT, NULL, 0, A, len, out);
            for (int64_t r = 0; r < mb; r++) {
                const double *e = out + r * nc;
                int best = 0;
                for (int q = 1; q < nc; q++)
                    if (e[q] < e[best])
                        best = q;
                before += e[0];
                after += e[best];
                float *w = c->W + (r0 + r) * c->cols + c0;
                const float m = mv[r * nc + best];
                for (int64_t i = 0; i < len; i++)
                    w[i] = w[i] < -m ? -m : (w[i] > m ? m : w[i]);
            }
        }
    }
    c->err[2 * ti] = before;
    c->err[2 * ti + 1] = after;
}

llm_status llm_awq_search_clip(enum llm_type t, const float *X, int64_t n, int64_t cols, float *W,
                               int64_t rows, int n_grid, float max_shrink, double *err_before,
                               double *err_after, int n_threads)
{
    struct llm_qgrid g;
    LLM_TRY(grid_of(t, &g));
    LLM_CHECK(X && W, LLM_E_INVALID, "awq: clip search: missing buffer");
    LLM_TRY(check_shape("clip search weight", rows, cols));
    LLM_TRY(check_shape("clip search tokens", n, cols));
    LLM_CHECK(n_grid >= 1 && n_threads >= 1 && max_shrink >= 0.0f && max_shrink < 1.0f,
              LLM_E_INVALID, "awq: clip search: n_grid %d, max_shrink %g, n_threads %d", n_grid,
              (double)max_shrink, n_threads);
    int n_cand = (int)(max_shrink * (float)n_grid);
    n_cand = n_cand < 1 ? 1 : n_cand;
    LLM_CHECK(n_cand <= 64, LLM_E_INVALID,
              "awq: clip search: %d candidates (max_shrink * n_grid), at most 64", n_cand);
    if (n_threads > rows)
        n_threads = (int)rows;
    const int64_t gl = group_len(&g, cols);
    const int64_t n_groups = (cols + gl - 1) / gl;
    const enum isa isa = isa_pick();
    llm_status st = LLM_E_NOMEM;
    struct rhs *b = llm_calloc((size_t)n_groups, sizeof *b);
    float *scratch = llm_malloc((size_t)n_threads * CL_ROWS * (size_t)n_cand * (size_t)gl *
                                sizeof(float));
    double *err = llm_calloc((size_t)n_threads * 2, sizeof(double));
    float *XT = llm_malloc((size_t)gl * (size_t)n * sizeof(float)); /* (gl, n) a group's X^T */
    float *G = llm_malloc((size_t)gl * (size_t)gl * sizeof(float)); /* (gl, gl) */
    float *imp = llm_kq_type(t) ? llm_malloc((size_t)cols * sizeof(float)) : NULL;
    if (!b || !scratch || !err || !XT || !G || (llm_kq_type(t) && !imp))
        goto done;
    /* A candidate's error on a group is sum over tokens of (a . x_k)^2 =
     * a G_k a^T with G_k = X_k^T X_k the group's Gram matrix over the
     * sample: gl^2 operations per candidate and row instead of gl * n. */
    for (int64_t k = 0; k < n_groups; k++) {
        const int64_t len = cols - k * gl < gl ? cols - k * gl : gl;
        if ((st = gram_of(X, n, cols, k * gl, len, isa, n_threads, XT, G)) != LLM_OK ||
            (st = rhs_pack_form(&b[k], G, len, len, isa)) != LLM_OK)
            goto done;
        for (int64_t j = 0; imp && j < len; j++) /* the importance: G_k's diagonal */
            imp[k * gl + j] = G[j * len + j];
    }
    struct cl_ctx c = { .g = &g, .b = b, .imp = imp, .W = W, .rows = rows, .cols = cols, .gl = gl,
                        .n_groups = n_groups, .n = n, .n_grid = n_grid, .n_cand = n_cand,
                        .scratch = scratch, .err = err };
    if ((st = run_threads(n_threads, cl_worker, &c)) != LLM_OK)
        goto done;
    double before = 0.0, after = 0.0;
    for (int i = 0; i < n_threads; i++)
        before += err[2 * i], after += err[2 * i + 1];
    const double norm = (double)n * (double)rows * (double)n_groups;
    if (err_before)
        *err_before = before / norm;
    if (err_after)
        *err_after = after / norm;
done:
    if (b)
        for (int64_t k = 0; k < n_groups; k++)
            rhs_free(&b[k]);
    llm_free(b);
    llm_free(scratch);
    llm_free(err);
    llm_free(XT);
    llm_free(G);
    llm_free(imp);
    return st;
}

// ----------------------------------------------------------------------------
// folding

void llm_awq_fold_norm(float *norm_w, float *bias, const float *s, int64_t cols)
{
    for (int64_t i = 0; i < cols; i++) {
        norm_w[i] /= s[i];
        if (bias)
            bias[i] /= s[i];
    }
}

void llm_awq_scale_cols(float *W, int64_t rows, int64_t cols, const float *s)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < cols; i++)
            W[r * cols + i] *= s[i];
}

llm_status llm_awq_fold_rows(float *W, int64_t rows, int64_t cols, float *bias, const float *s,
                             int64_t n_s)
{
    LLM_CHECK(n_s >= 0 && n_s <= rows, LLM_E_INVALID,
              "awq: fold_rows: %lld scales for %lld rows", (long long)n_s, (long long)rows);
    const int64_t r0 = rows - n_s;
    for (int64_t r = r0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++)
            W[r * cols + i] /= s[r - r0];
        if (bias)
            bias[r] /= s[r - r0];
    }
    return LLM_OK;
}

void llm_awq_abs_sum_add(double *sum, const float *X, int64_t n, int64_t cols)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < cols; i++)
            sum[i] += fabsf(X[t * cols + i]);
}
