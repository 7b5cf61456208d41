/* cpu.c: the CPU backend. Activations are host memory; weights are read in
 * place from the mapping by ops/matmul.h, or from the interleaved copy of
 * the 4-bit matrices that bind makes. Work big enough to pay for a barrier
 * is split across the persistent pool; small work (stories260K's 64-wide
 * layers) runs on the calling thread, because there a barrier costs more
 * than the arithmetic. How work is split never changes a row's
 * arithmetic: a matrix row, an attention head of a token, a norm row are
 * each computed whole by one thread. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../ops/matmul.h"
#include "../ops/vec.h"
#include "../quant/quant.h"
#include "backend.h"

#include "../quant/kquants.h"

/* Multiply-adds below which an op stays on one thread. */
#define CPU_SERIAL_WORK (1 << 16)
/* Elements below which an element-wise op (a gate, a norm) stays on one
 * thread. */
#define CPU_SPLIT_MIN 32768

struct cpu_backend {
    struct llm_backend base;
    struct llm_pool *pool;
    float *scores;          /* (n_threads, scores_heads, ATT_GROUP, scores_cap) attention
                             * scratch */
    size_t scores_cap;
    int32_t scores_heads;
    int repack;             /* bind makes the interleaved 4-bit copies */
    void **owned;           /* (n_owned) the copies bind made */
    size_t n_owned, cap_owned;
    int64_t *task0;         /* (cap_task0) attention's task offsets per segment */
    size_t cap_task0;
    uint16_t *win;          /* q4ch keys: (cap_win) fp16 rows of each segment's own blocks */
    size_t cap_win;
    int64_t *win_off;       /* (cap_task0) where each segment's rows start in win */
    uint16_t *xbf;          /* (cap_xbf bytes) a lowp product's activations in bf16 */
    size_t cap_xbf;
};

static int work_threads(const struct cpu_backend *cb, double work)
{
    int n = llm_pool_size(cb->pool);
    if (work < CPU_SERIAL_WORK)
        return 1;
    double per = work / CPU_SERIAL_WORK;
    return per < n ? (int)per < 1 ? 1 : (int)per : n;
}

static void cpu_destroy(struct llm_backend *b)
{
    struct cpu_backend *cb = (struct cpu_backend *)b;
    llm_pool_free(cb->pool);
    llm_free(cb->scores);
    llm_free(cb->task0);
    llm_free(cb->win);
    llm_free(cb->win_off);
    llm_free(cb->xbf);
    for (size_t i = 0; i < cb->n_owned; i++)
        llm_free(cb->owned[i]);
    llm_free(cb->owned);
    llm_free(cb);
}

static llm_status cpu_threads(struct llm_backend *b, int n)
{
    struct cpu_backend *cb = (struct cpu_backend *)b;
    if (n > 63)
        n = 63;
    if (n < 1 || n == llm_pool_size(cb->pool))
        return LLM_OK;
    struct llm_pool *p;
    LLM_TRY(llm_pool_new(&p, n));
    llm_pool_free(cb->pool);
    cb->pool = p;
    /* the attention scratch is per thread */
    llm_free(cb->scores);
    cb->scores = NULL;
    cb->scores_cap = 0;
    cb->scores_heads = 0;
    b->n_threads = n;
    return LLM_OK;
}

static void cpu_host_run(struct llm_backend *b, void (*fn)(int i, int n, void *ctx), void *ctx)
{
    struct cpu_backend *cb = (struct cpu_backend *)b;
    llm_pool_run(cb->pool, fn, ctx);
}

static llm_status cpu_alloc(struct llm_backend *b, size_t bytes, void **out)
{
    (void)b;
    *out = llm_calloc(1, bytes ? bytes : 1);
    return *out ? LLM_OK : LLM_E_NOMEM;
}

static void cpu_release(struct llm_backend *b, void *p)
{
    (void)b;
    llm_free(p);
}

static llm_status cpu_download(struct llm_backend *b, void *dst, const void *src, size_t bytes)
{
    (void)b;
    if (dst != src)
        memcpy(dst, src, bytes);
    return LLM_OK;
}

/* The 8-bit twin of a 32-element GGUF type, the same values exactly (an
 * element's value d*c, or d*c + m, with the same binary16 d and m and its
 * canonical code c as a byte): Q5_0 and IQ4_NL as q8_0, Q5_1 as q8z_g32;
 * the type itself otherwise. */
static enum llm_type twin8(enum llm_type t)
{
    return t == LLM_TYPE_Q5_0 || t == LLM_TYPE_IQ4_NL ? LLM_TYPE_Q8_0
         : t == LLM_TYPE_Q5_1                         ? LLM_TYPE_Q8Z_G32
                                                      : t;
}

/* rows (n) of type t at src as rows of its 8-bit twin at dst */
static void widen8(enum llm_type t, const uint8_t *src, int64_t ne0, int64_t n, uint8_t *dst)
{
    const uint64_t sb = llm_type_traits(t)->block_bytes;
    const enum llm_type d8 = twin8(t);
    const uint64_t db = llm_type_traits(d8)->block_bytes;
    int16_t c[32];
    float s[2], m[2];
    for (int64_t b = 0; b < n * (ne0 / 32); b++) {
        const uint8_t *blk = src + (uint64_t)b * sb;
        uint8_t *out = dst + (uint64_t)b * db;
        llm_kq_unpack(t, blk, c, s, m);
        memcpy(out, blk, d8 == LLM_TYPE_Q8Z_G32 ? 4 : 2); /* d (and m), binary16 */
        for (int j = 0; j < 32; j++)
            out[db - 32 + j] = (uint8_t)(int8_t)c[j];
    }
}

/* The interleaved copy of a matrix that takes it (ops/matmul.h: the
 * CPU's decode layout, 2.5x fewer instructions per block than the rows):
 * the 4- and 8-bit types, and Q5_0, Q5_1 and IQ4_NL through their 8-bit
 * twins (twin8), which on SmolLM2's Q4_K_M (166 of its 211 matrices Q5_0)
 * decode faster than the 5-bit rows although they read more bytes. Other
 * weights are read in place. LLM_X16=0 in the environment keeps the rows
 * (to compare). */
static llm_status cpu_bind(struct llm_backend *b, struct llm_weight *w,
                           void (*done)(void *ctx, const void *p, size_t n), void *ctx)
{
    struct cpu_backend *cb = (struct cpu_backend *)b;
    const enum llm_type xt = twin8(w->type);
    if (!cb->repack || w->x16 || !w->data || !llm_x16_enabled() ||
        !llm_x16_ok(xt, w->ne0, w->rows))
        return LLM_OK;
    const size_t rb = (size_t)llm_type_row_bytes(w->type, (uint64_t)w->ne0);
    const size_t xb = (size_t)llm_type_row_bytes(xt, (uint64_t)w->ne0);
    void *own = cb->owned;
    LLM_TRY(llm_grow(&own, &cb->cap_owned, cb->n_owned + 1, sizeof *cb->owned));
    cb->owned = own;
    uint8_t *p = llm_malloc(xb * (size_t)w->rows);
    uint8_t *wide = xt != w->type ? llm_malloc(xb * 1024) : NULL; // (1024, xb)
    if (!p || (xt != w->type && !wide)) {
        llm_free(p);
        llm_free(wide);
        return llm_error_set(LLM_E_NOMEM, "no memory for the interleaved copy of a %lld x %lld "
                             "%s matrix", (long long)w->rows, (long long)w->ne0,
                             llm_type_name(w->type));
    }
    /* groups of 16 rows are independent: a stretch at a time, each handed
     * back as soon as it is copied */
    const uint8_t *src = w->data;
    for (int64_t r = 0; r < w->rows; r += 1024) {
        const int64_t n = w->rows - r < 1024 ? w->rows - r : 1024;
        const uint8_t *rows = src + (size_t)r * rb;
        if (wide) {
            widen8(w->type, rows, w->ne0, n, wide);
            rows = wide;
        }
        llm_status s = llm_x16_pack(xt, rows, w->ne0, n, p + (size_t)r * xb);
        if (s) {
            llm_free(p);
            llm_free(wide);
            return s;
        }
        if (done)
            done(ctx, src + (size_t)r * rb, (size_t)n * rb);
    }
    llm_free(wide);
    cb->owned[cb->n_owned++] = p;
    w->x16 = p;
    w->x16_type = xt;
    return LLM_OK;
}

/* A row of the table is read from the interleaved copy when there is one
 * (a tied head's: the file's pages of the table were dropped, and faulting
 * them back one row at a time would bring in their neighbours too). */
static llm_status cpu_embed(struct llm_backend *b, const struct llm_weight *W, const int32_t *tokens,
                            int32_t n, float *x)
{
    (void)b;
    const uint64_t rb = llm_type_row_bytes(W->type, (uint64_t)W->ne0);
    const enum llm_type xt = W->x16 ? W->x16_type : W->type;
    const uint64_t xb = llm_type_row_bytes(xt, (uint64_t)W->ne0);
    uint8_t *grp = NULL; /* (16, xb) a group of rows unpacked */
    if (W->x16 && !(grp = llm_malloc(16 * (size_t)xb)))
        return LLM_E_NOMEM;
    llm_status s = LLM_OK;
    for (int32_t i = 0; i < n && !s; i++) {
        const int32_t t = tokens[i];
        if (t < 0 || t >= W->rows) {
            s = llm_error_set(LLM_E_INVALID, "token id %d out of range (vocabulary of %lld)", t,
                              (long long)W->rows);
            break;
        }
        const uint8_t *row = (const uint8_t *)W->data + rb * (uint64_t)t;
        if (grp) {
            s = llm_x16_unpack(xt, W->x16, W->ne0, t / 16 * 16, t / 16 * 16 + 16, grp);
            row = grp + xb * (uint64_t)(t % 16);
        }
        if (!s) /* the 8-bit twin's values are the type's exactly */
            s = llm_dequantize_row(grp ? xt : W->type, row, x + (int64_t)i * W->ne0, W->ne0);
    }
    llm_free(grp);
    return s;
}

struct norm_job {
    const float *x, *g;
    float *y;
    int32_t n;
    int64_t dim;
    float eps;
};

/* tokens [n i / nth, n (i + 1) / nth): each row's arithmetic is the same
 * whichever thread takes it */
static void norm_run(int i, int nth, void *arg)
{
    const struct norm_job *j = arg;
    const int64_t t0 = (int64_t)j->n * i / nth, t1 = (int64_t)j->n * (i + 1) / nth;
    llm_vec_rmsnorm(j->x + t0 * j->dim, j->g, j->y + t0 * j->dim, t1 - t0, j->dim, j->eps);
}

/* Over threads for a prefill's or a calibration chunk's rows (each row's
 * sum of squares is one dependent chain of dim adds). */
static llm_status cpu_rmsnorm(struct llm_backend *b, const float *x, const struct llm_weight *w,
                              float *y, int32_t n, int64_t dim, float eps)
{
    struct cpu_backend *cb = (struct cpu_backend *)b;
    struct norm_job j = { x, w->data, y, n, dim, eps };
    if (n < 8 || (int64_t)n * dim < CPU_SPLIT_MIN || llm_pool_size(cb->pool) == 1)
        norm_run(0, 1, &j);
    else
        llm_pool_run(cb->pool, norm_run, &j);
    return LLM_OK;
}

struct mm_job {
    int n_w;
    const struct llm_weight *const *W;
    const struct llm_weight *const *bias;
    const float *X;
    const uint16_t *Xbf;    /* X for the lowp weights (ops/matmul.h llm_bf16_pack_x) */
    float *const *Y;
    int32_t n;
    int64_t total_rows;
    int use;                /* threads that take a share */
    llm_status status[64];
};

/* Tokens from which a lowp product runs in bf16 on the matrix units (the
 * tiles take 16 tokens; fewer would round for little gain). */
#define LOWP_MIN_TOKENS 8

/* Thread i takes an equal slice of the weights' rows laid end to end. */
static void mm_run(int i, int nth, void *arg)
{
    struct mm_job *j = arg;
    int64_t lo = j->total_rows * i / nth, hi = j->total_rows * (i + 1) / nth, base = 0;
    llm_status s = LLM_OK;
    for (int w = 0; w < j->n_w && !s; w++) {
        const struct llm_weight *W = j->W[w];
        int64_t r0 = lo - base, r1 = hi - base;
        base += W->rows;
        if (r0 < 0)
            r0 = 0;
        if (r1 > W->rows)
            r1 = W->rows;
        if (W->x16) {
            /* whole groups of 16 rows: the same rounding on both sides of
             * a boundary keeps the threads' shares disjoint */
            r0 &= ~(int64_t)15;
            r1 &= ~(int64_t)15;
        }
        if (r0 >= r1)
            continue;
        if (W->x16)
            s = j->n == 1 ? llm_matvec_x16(W->x16_type, W->x16, j->X, j->Y[w], W->ne0, r0, r1)
                          : llm_matmul_x16(W->x16_type, W->x16, j->X, j->Y[w], W->ne0, j->n,
                                           W->rows, r0, r1);
        else if (j->Xbf) /* every weight of the call is lowp f32 (cpu_matmul) */
            s = llm_matmul_bf16_packed(W->data, j->Xbf, j->Y[w], W->ne0, j->n, W->rows, r0, r1);
        else if (j->n == 1)
            s = llm_matvec(W->type, W->data, j->X, j->Y[w], W->ne0, r0, r1);
        else
            s = llm_matmul(W->type, W->data, j->X, j->Y[w], W->ne0, j->n, W->rows, r0, r1);
        if (!s && j->bias && j->bias[w]) {
            const float *bv = j->bias[w]->data;
            for (int32_t t = 0; t < j->n; t++)
                for (int64_t r = r0; r < r1; r++)
                    j->Y[w][t * W->rows + r] += bv[r];
        }
    }
    j->status[i] = s;
}

static void mm_thread(int i, int nth, void *arg)
{
    struct mm_job *j = arg;
    if (i < j->use)
        mm_run(i, j->use, arg);
    (void)nth;
}

static llm_status cpu_matmul(struct llm_backend *b, int n_w, const struct llm_weight *const *W,
                             const struct llm_weight *const *bias, const float *X, float *const *Y,
                             int32_t n)
{
    struct cpu_backend *cb = (struct cpu_backend *)b;
    struct mm_job j = { .n_w = n_w, .W = W, .bias = bias, .X = X, .Y = Y, .n = n };
    double work = 0;
    for (int w = 0; w < n_w; w++) {
        j.total_rows += W[w]->rows;
        work += (double)W[w]->rows * (double)W[w]->ne0 * n;
    }
    /* lowp float weights read X in bf16, rounded once for all threads
     * (the weights of one call share ne0) */
    int lowp = n >= LOWP_MIN_TOKENS;
    for (int w = 0; w < n_w && lowp; w++)
        lowp = W[w]->lowp && W[w]->type == LLM_TYPE_F32 && W[w]->ne0 == W[0]->ne0;
    if (lowp && llm_amx_ok()) {
        const size_t bytes = llm_bf16_x_bytes(n, W[0]->ne0);
        if (bytes > cb->cap_xbf) {
            uint16_t *p = llm_realloc(cb->xbf, bytes);
            if (!p)
                return LLM_E_NOMEM;
            cb->xbf = p;
            cb->cap_xbf = bytes;
        }
        llm_bf16_pack_x(X, n, W[0]->ne0, cb->xbf);
        j.Xbf = cb->xbf;
    }
    int use = work_threads(cb, work);
    if (use > 63)
        use = 63;
    if (use <= 1) {
        mm_run(0, 1, &j);
        return j.status[0];
    }
    j.use = use;
    llm_pool_run(cb->pool, mm_thread, &j);
    for (int i = 0; i < use; i++)
        if (j.status[i])
            return j.status[i];
    return LLM_OK;
}

/* cs: [cos, sin] of each pair */
static void rope_vec(float *x, int32_t n_heads, int32_t hd, int32_t half, int neox, const float *cs)
{
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * hd;
        for (int32_t i = 0; i < half; i++) {
            int32_t a = neox ? i : 2 * i, bi = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[bi], c = cs[2 * i], s = cs[2 * i + 1];
            v[a] = x0 * c - x1 * s;
            v[bi] = x0 * s + x1 * c;
        }
    }
}

static llm_status cpu_rope(struct llm_backend *b, const struct llm_attn_shape *sh, int32_t n_dims,
                           int neox, const float *cs, float *q, float *k, int32_t n)
{
    (void)b;
    if (n_dims > sh->head_dim || n_dims % 2)
        return llm_error_set(LLM_E_UNSUPPORTED, "rope: %d rotary dimensions (even, at most the "
                             "head size %d)", n_dims, sh->head_dim);
    const int32_t half = n_dims / 2;
    const int64_t qd = (int64_t)sh->n_heads * sh->head_dim,
                  kd = (int64_t)sh->n_kv_heads * sh->head_dim;
    for (int32_t t = 0; t < n; t++) {
        const float *c = cs + (int64_t)t * n_dims;
        rope_vec(q + t * qd, sh->n_heads, sh->head_dim, half, neox, c);
        rope_vec(k + t * kd, sh->n_kv_heads, sh->head_dim, half, neox, c);
    }
    return LLM_OK;
}

void llm_rope_table(const struct llm_rope *r, const int32_t *pos, int32_t n, float *cs)
{
    const int32_t half = r->n_dims / 2;
    for (int32_t t = 0; t < n; t++) {
        const float p = (float)pos[t];
        float *c = cs + (int64_t)t * 2 * half;
        for (int32_t i = 0; i < half; i++) {
            const float th = p * r->inv_freq[i];
            c[2 * i] = cosf(th) * r->mscale;
            c[2 * i + 1] = sinf(th) * r->mscale;
        }
    }
}

struct att_job {
    const struct llm_attn_shape *s;
    struct llm_kv *kv;
    int32_t layer, n_seg, use;
    int32_t per;            /* query heads a task: 1, or a KV head's group */
    const struct llm_seg *seg;
    const int64_t *task0;   /* (n_seg + 1) the first task of each segment, then the total */
    const uint16_t *win;    /* q4ch keys: the fp16 rows of segment g from the start of its
                             * first block, at win + win_off[g] */
    const int64_t *win_off;
    const float *q;
    float *out;
    float *probs;           /* (n_heads, seg->n, seg->pos + seg->n) or NULL */
    float *scores;
    size_t scores_cap;
};

/* Query tokens per attention task: the tokens of a group read each KV
 * block while it is in L1, where one token at a time read the whole
 * layer's cache from L2/L3 per token (1.5 MB a token at 512 tokens of
 * stories110m's shape). */
#define ATT_GROUP 8

/* The positions [*a, *a + m) of the KV block starting at p0 (bs long) that
 * a token seeing [lo, len) attends to; m 0 or less: none. */
static inline int32_t block_rows(int32_t lo, int32_t len, int32_t p0, int32_t bs, int32_t *a)
{
    *a = lo > p0 ? lo : p0;
    return (len - p0 < bs ? len : p0 + bs) - *a;
}

/* The first position a token seeing [0, len) attends to under a sliding
 * window of swa positions (0: none). */
static inline int32_t swa_start(int32_t len, int32_t swa)
{
    return swa > 0 && len > swa ? len - swa : 0;
}

/* Causal attention of nt consecutive query tokens (token i sees positions
 * [0, len0 + i), or the last swa of them) of nh query heads that share KV
 * head kvh, walking the sequence's block table block by block (no
 * division per position); each block's rows go to the multi-row kernels of
 * vec.h once per token while the block is in cache, and for float, fp16
 * and bf16 caches once for all nh heads (a row loaded once for them). q:
 * token i's query of head j at q + i * qs + j * hd; o likewise (NULL: the
 * probabilities alone, no values read); sc (nh, nt, cap): scratch for the
 * scores, whose last hd floats a row hold the token's rotated query when
 * the keys are q4 (kv.h: the rotation); probs:
 * head j's token i at probs + j * ps + i * pld. q4ch keys: a token reads its
 * own block from the fp16 rows win (kv_dim apart, the first at position
 * w0), every block before it quantized (kv.h). Each token's and head's
 * arithmetic is the same whatever nt and nh. */
LLM_VEC_O3 static void att_group(const struct llm_kv *kv, int32_t layer, int32_t seq,
                                 int32_t kvh, int32_t nh, int32_t hd, float scale, float softcap,
                                 const float *q, int64_t qs, int32_t nt, int32_t len0, int32_t swa,
                                 float *sc, int64_t cap, float *o, float *probs, int64_t ps,
                                 int64_t pld, const uint16_t *win, int32_t w0)
{
    const int32_t bs = kv->p.block_size, len = len0 + nt - 1;
    /* blocks wholly before the first token's window are read by none */
    const int32_t first = swa_start(len0, swa) / bs * bs;
    const int32_t *table = kv->tables + (int64_t)seq * kv->max_blocks;
    const int64_t kvd = kv->kv_dim, hs = (int64_t)nt * cap; /* a head's scores */
    const enum llm_type tk = kv->p.type_k, tv = kv->p.type_v;
    /* float, fp16 and bf16 rows: the kernels for all the heads at once */
    const int kn = tk == LLM_TYPE_F32 || tk == LLM_TYPE_F16 || tk == LLM_TYPE_BF16;
    const int vn = tv == LLM_TYPE_F32 || tv == LLM_TYPE_F16 || tv == LLM_TYPE_BF16;
    /* rows addressed in bytes, which the rows of blocks need: head kvh
     * starts row_bytes / n_kv_heads * kvh into its row; the element types
     * step rows by kvd elements */
    const int64_t rk = (int64_t)kv->row_bytes_k, hk = rk / kv->p.n_kv_heads;
    const int64_t rv = (int64_t)kv->row_bytes_v, hv = rv / kv->p.n_kv_heads;
    const uint8_t *K = kv->k, *V = kv->v;
    if (tk == LLM_TYPE_Q4_0) /* each (head, token) row's rotated query, at its end */
        for (int32_t j = 0; j < nh; j++)
            for (int32_t i = 0; i < nt; i++) {
                float *r = sc + j * hs + i * cap + cap - hd;
                memcpy(r, q + i * qs + j * hd, (size_t)hd * sizeof(float));
                llm_vec_hadamard32(r, hd);
            }
    for (int32_t p0 = first; tk == LLM_TYPE_Q4Z_CH && p0 < len; p0 += bs) {
        const int64_t row0 = llm_kv_block_row(kv, layer, table[p0 / bs]);
        const uint8_t *kb = K + row0 * rk + kvh * llm_q4ch_head_bytes(hd, bs);
        for (int32_t j = 0; j < nh; j++)
            for (int32_t i = 0; i < nt; i++) {
                const int32_t own = (len0 + i - 1) / bs * bs; /* this token's block */
                float *si = sc + j * hs + i * cap + p0;
                const float *qi = q + i * qs + j * hd;
                if (p0 < own)
                    llm_vec_dots_q4ch(qi, kb, hd, bs, si);
                else if (p0 == own)
                    llm_vec_dots_f16(qi, win + (int64_t)(p0 - w0) * kvd + (int64_t)kvh * hd, kvd,
                                     len0 + i - p0, hd, si);
            }
    }
    for (int32_t p0 = first; tk != LLM_TYPE_Q4Z_CH && p0 < len; p0 += bs) {
        const int64_t row0 = llm_kv_block_row(kv, layer, table[p0 / bs]);
        for (int32_t i = 0, a; i < nt; i++) {
            const int32_t m = block_rows(swa_start(len0 + i, swa), len0 + i, p0, bs, &a);
            if (m <= 0)
                continue;
            const uint8_t *kb = K + (row0 + a - p0) * rk + kvh * hk;
            const float *qi = q + i * qs;
            float *si = sc + i * cap + a;
            if (tk == LLM_TYPE_F16)
                llm_vec_dots_f16_n(qi, hd, nh, (const uint16_t *)kb, kvd, m, hd, si, hs);
            else if (tk == LLM_TYPE_BF16)
                llm_vec_dots_bf16_n(qi, hd, nh, (const uint16_t *)kb, kvd, m, hd, si, hs);
            else if (kn)
                llm_vec_dots_f32_n(qi, hd, nh, (const float *)kb, kvd, m, hd, si, hs);
            for (int32_t j = 0; !kn && j < nh; j++, si += hs) {
                if (tk == LLM_TYPE_Q8_0)
                    llm_vec_dots_q8_0(qi + j * hd, kb, rk, m, hd, si);
                else if (tk == LLM_TYPE_Q4_0)
                    llm_vec_dots_q4_0(sc + j * hs + i * cap + cap - hd, kb, rk, m, hd, si);
                else /* fp8 */
                    llm_vec_dots_fp8(qi + j * hd, kb, kvd, m, hd, si);
            }
        }
    }
    for (int32_t j = 0; j < nh; j++)
        for (int32_t i = 0; i < nt; i++) {
            float *si = sc + j * hs + i * cap;
            const int32_t li = len0 + i, lo = swa_start(li, swa);
            llm_vec_softmax(si, lo, li, scale, softcap);
            if (o)
                memset(o + i * qs + j * hd, 0, (size_t)hd * sizeof(float));
            if (probs) { /* the tap: row i's probabilities, zeros outside them */
                float *pr = probs + j * ps + i * pld;
                memset(pr, 0, (size_t)lo * sizeof(float));
                memcpy(pr + lo, si + lo, (size_t)(li - lo) * sizeof(float));
                memset(pr + li, 0, (size_t)(pld - li) * sizeof(float));
            }
        }
    for (int32_t p0 = first; o && p0 < len; p0 += bs) {
        const int64_t row0 = llm_kv_block_row(kv, layer, table[p0 / bs]);
        for (int32_t i = 0, a; i < nt; i++) {
            const int32_t m = block_rows(swa_start(len0 + i, swa), len0 + i, p0, bs, &a);
            if (m <= 0)
                continue;
            const uint8_t *vb = V + (row0 + a - p0) * rv + kvh * hv;
            const float *wi = sc + i * cap + a;
            float *oi = o + i * qs;
            if (tv == LLM_TYPE_F16)
                llm_vec_axpys_f16_n(oi, hd, wi, hs, nh, (const uint16_t *)vb, kvd, m, hd);
            else if (tv == LLM_TYPE_BF16)
                llm_vec_axpys_bf16_n(oi, hd, wi, hs, nh, (const uint16_t *)vb, kvd, m, hd);
            else if (vn)
                llm_vec_axpys_f32_n(oi, hd, wi, hs, nh, (const float *)vb, kvd, m, hd);
            for (int32_t j = 0; !vn && j < nh; j++, wi += hs, oi += hd) {
                if (tv == LLM_TYPE_Q8_0)
                    llm_vec_axpys_q8_0(oi, wi, vb, rv, m, hd);
                else if (tv == LLM_TYPE_Q4_0)
                    llm_vec_axpys_q4_0(oi, wi, vb, rv, m, hd);
                else /* fp8 */
                    llm_vec_axpys_fp8(oi, wi, vb, kvd, m, hd);
            }
        }
    }
    if (o && tv == LLM_TYPE_Q4_0) /* the values were rotated: rotate the sum back */
        for (int32_t j = 0; j < nh; j++)
            for (int32_t i = 0; i < nt; i++)
                llm_vec_hadamard32(o + i * qs + j * hd, hd);
}

/* Tasks (a group of ATT_GROUP tokens of a segment, and a head or the
 * j->per query heads of one KV head) go round-robin to the threads: under
 * the causal mask later tokens cost more, and contiguous halves gave one
 * thread three times the other's work. A KV head's query heads in one task
 * read its rows once for all of them; each head's arithmetic is the same
 * either way. */
static void att_run(int ti, int nth, void *arg)
{
    struct att_job *j = arg;
    if (ti >= j->use)
        return;
    nth = j->use;
    const struct llm_attn_shape *s = j->s;
    int32_t hd = s->head_dim, grp = s->n_heads / s->n_kv_heads;
    int64_t qs = (int64_t)s->n_heads * hd, cap = (int64_t)j->scores_cap;
    float *sc = j->scores + (size_t)ti * ATT_GROUP * (size_t)j->per * j->scores_cap;
    int32_t g = 0; /* the segment of the task: tasks only grow */
    for (int64_t task = ti; task < j->task0[j->n_seg]; task += nth) {
        while (task >= j->task0[g + 1])
            g++;
        const struct llm_seg *sg = &j->seg[g];
        const int64_t local = task - j->task0[g], units = s->n_heads / j->per;
        int32_t t0 = (int32_t)(local / units) * ATT_GROUP;
        int32_t nt = sg->n - t0 < ATT_GROUP ? sg->n - t0 : ATT_GROUP;
        const int64_t pld = sg->pos + sg->n;
        const int32_t h = (int32_t)(local % units) * j->per;
        int64_t qo = (int64_t)(sg->row + t0) * qs + (int64_t)h * hd;
        float *pr = j->probs ? j->probs + ((int64_t)h * sg->n + t0) * pld : NULL;
        att_group(j->kv, j->layer, sg->seq, h / grp, j->per, hd, s->scale, s->softcap, j->q + qo,
                  qs, nt, sg->pos + t0 + 1, s->window, sc, cap, j->out ? j->out + qo : NULL, pr,
                  (int64_t)sg->n * pld, pld, j->win ? j->win + j->win_off[g] : NULL,
                  sg->pos / j->kv->p.block_size * j->kv->p.block_size);
    }
}

static llm_status cpu_kv_copy(struct llm_backend *b, struct llm_kv *kv)
{
    (void)b;
    llm_kv_copy_host(kv);
    return LLM_OK;
}

/* q4ch keys: the fp16 rows each segment's tokens read for their own blocks
 * (kv.h), from the start of the segment's first block: the earlier rows of
 * that block from the tail, taken before this step's store can reuse its
 * slot, then the segment's own keys rounded as the tail rounds them. */
static llm_status q4ch_windows(struct cpu_backend *cb, const struct llm_kv *kv, int32_t layer,
                               const struct llm_seg *seg, int32_t n_seg, const float *k)
{
    const int32_t bs = kv->p.block_size;
    const int64_t d = kv->kv_dim;
    size_t rows = 0;
    for (int32_t i = 0; i < n_seg; i++) {
        cb->win_off[i] = (int64_t)rows * d;
        rows += (size_t)(seg[i].pos % bs + seg[i].n);
    }
    if (rows * (size_t)d > cb->cap_win) {
        void *p = cb->win;
        LLM_TRY(llm_grow(&p, &cb->cap_win, rows * (size_t)d, sizeof *cb->win));
        cb->win = p;
    }
    for (int32_t i = 0; i < n_seg; i++) {
        const struct llm_seg *g = &seg[i];
        uint16_t *w = cb->win + cb->win_off[i];
        const int32_t w0 = g->pos / bs * bs;
        for (int32_t p = w0; p < g->pos; p++, w += d)
            memcpy(w, llm_kv_tail_row(kv, g->seq, layer, p), (size_t)d * sizeof(uint16_t));
        const float *src = k + (int64_t)g->row * d;
        for (int64_t e = 0; e < (int64_t)g->n * d; e++)
            w[e] = llm_fp32_to_fp16(src[e]);
    }
    return LLM_OK;
}

static llm_status cpu_attention(struct llm_backend *b, const struct llm_attn_shape *s,
                                struct llm_kv *kv, int32_t layer, const struct llm_seg *seg,
                                int32_t n_seg, const float *q, const float *k, const float *v,
                                float *out, float *probs)
{
    struct cpu_backend *cb = (struct cpu_backend *)b;
    if (probs && n_seg != 1)
        return llm_error_set(LLM_E_INVALID, "attention: probabilities of %d runs at once", n_seg);
    if (!out != !v || (!out && !probs)) /* both or neither; neither: the probabilities alone */
        return llm_error_set(LLM_E_INVALID, "attention: no output or no values, but not the "
                             "probabilities alone");
    const int64_t kd = kv->kv_dim;
    if ((size_t)n_seg + 1 > cb->cap_task0) {
        void *p = cb->task0, *w = cb->win_off;
        size_t cap = cb->cap_task0;
        LLM_TRY(llm_grow(&w, &cap, (size_t)n_seg + 1, sizeof *cb->win_off));
        cb->win_off = w;
        LLM_TRY(llm_grow(&p, &cb->cap_task0, (size_t)n_seg + 1, sizeof *cb->task0));
        cb->task0 = p;
    }
    if (kv->p.type_k == LLM_TYPE_Q4Z_CH)
        LLM_TRY(q4ch_windows(cb, kv, layer, seg, n_seg, k));
    double work = 0;
    int64_t groups = 0;
    for (int32_t i = 0; i < n_seg; i++) {
        const struct llm_seg *g = &seg[i];
        llm_kv_store_host(kv, layer, g->seq, g->pos, g->n, k + (int64_t)g->row * kd,
                          v ? v + (int64_t)g->row * kd : NULL);
        const int32_t end = g->pos + g->n, seen = end - swa_start(end, s->window);
        work += 2.0 * g->n * s->n_heads * (double)seen * s->head_dim;
        groups += (g->n + ATT_GROUP - 1) / ATT_GROUP;
    }
    int nth = llm_pool_size(cb->pool);
    /* a KV head's query heads share a task when that leaves enough tasks
     * to balance the threads (one sequence's decode keeps a task a head) */
    const int32_t grp = s->n_heads / s->n_kv_heads;
    const int32_t per = grp > 1 && groups * s->n_kv_heads >= 4 * (int64_t)nth ? grp : 1;
    cb->task0[0] = 0;
    for (int32_t i = 0; i < n_seg; i++)
        cb->task0[i + 1] = cb->task0[i] + (int64_t)(seg[i].n + ATT_GROUP - 1) / ATT_GROUP *
                                              (s->n_heads / per);
    /* a token's scores, then room for its rotated query (att_group): a
     * thread's ATT_GROUP tokens of each of its task's heads */
    size_t cap = (size_t)kv->p.max_tokens + (size_t)s->head_dim;
    if (cb->scores_cap < cap || cb->scores_heads < grp) {
        llm_free(cb->scores);
        cb->scores = llm_malloc(cap * (size_t)nth * ATT_GROUP * (size_t)grp * sizeof(float));
        cb->scores_cap = cb->scores ? cap : 0;
        cb->scores_heads = cb->scores ? grp : 0;
        if (!cb->scores)
            return LLM_E_NOMEM;
    }
    struct att_job j = { .s = s, .kv = kv, .layer = layer, .n_seg = n_seg, .per = per, .seg = seg,
                         .task0 = cb->task0, .q = q, .out = out, .probs = probs,
                         .win = kv->p.type_k == LLM_TYPE_Q4Z_CH ? cb->win : NULL,
                         .win_off = cb->win_off,
                         .scores = cb->scores,
                         .scores_cap = cb->scores_cap };
    const int64_t tasks = cb->task0[n_seg];
    j.use = work_threads(cb, work);
    if (j.use > tasks)
        j.use = (int)tasks;
    if (j.use <= 1) {
        j.use = 1;
        att_run(0, 1, &j);
    } else {
        llm_pool_run(cb->pool, att_run, &j);
    }
    return LLM_OK;
}

struct ew_job {
    float *g;
    const float *u;
    int64_t m;
    void (*range)(float *g, const float *u, int64_t lo, int64_t hi);
};

static void swiglu_range(float *g, const float *u, int64_t lo, int64_t hi)
{
    llm_vec_swiglu(g + lo, u + lo, hi - lo);
}

/* GELU's tanh form, as transformers' gelu_pytorch_tanh and ggml_gelu
 * (ops/vec.h: every element the same arithmetic wherever the range cuts) */
static void geglu_range(float *g, const float *u, int64_t lo, int64_t hi)
{
    llm_vec_geglu(g + lo, u + lo, hi - lo);
}

static void ew_run(int i, int nth, void *arg)
{
    struct ew_job *j = arg;
    j->range(j->g, j->u, j->m * i / nth, j->m * (i + 1) / nth);
}

/* An element-wise gate over threads when it is long enough to pay; each
 * element's arithmetic is the same either way. */
static llm_status ew_gate(struct llm_backend *b, float *gate, const float *up, int64_t m,
                          void (*range)(float *, const float *, int64_t, int64_t))
{
    struct cpu_backend *cb = (struct cpu_backend *)b;
    if (m < CPU_SPLIT_MIN || llm_pool_size(cb->pool) == 1) {
        range(gate, up, 0, m);
    } else {
        struct ew_job j = { gate, up, m, range };
        llm_pool_run(cb->pool, ew_run, &j);
    }
    return LLM_OK;
}

static llm_status cpu_swiglu(struct llm_backend *b, float *gate, const float *up, int64_t m)
{
    return ew_gate(b, gate, up, m, swiglu_range);
}

static llm_status cpu_geglu(struct llm_backend *b, float *gate, const float *up, int64_t m)
{
    return ew_gate(b, gate, up, m, geglu_range);
}

static llm_status cpu_get_rows(struct llm_backend *b, const float *x, const int32_t *rows,
                               float *y, int32_t n, int64_t width)
{
    (void)b;
    for (int32_t i = 0; i < n; i++)
        memcpy(y + (int64_t)i * width, x + (int64_t)rows[i] * width, (size_t)width * sizeof(float));
    return LLM_OK;
}

static llm_status cpu_set_rows(struct llm_backend *b, const float *x, const int32_t *rows,
                               float *y, int32_t n, int64_t width)
{
    (void)b;
    for (int32_t i = 0; i < n; i++)
        memcpy(y + (int64_t)rows[i] * width, x + (int64_t)i * width, (size_t)width * sizeof(float));
    return LLM_OK;
}

static llm_status cpu_combine(struct llm_backend *b, float *out, const float *y, const float *w,
                              int32_t n, int32_t k, int64_t width, int accumulate)
{
    (void)b;
    for (int32_t t = 0; t < n; t++) {
        float *o = out + (int64_t)t * width;
        if (!accumulate)
            memset(o, 0, (size_t)width * sizeof(float));
        for (int32_t j = 0; j < k; j++) {
            const float wj = w[(int64_t)t * k + j];
            const float *yj = y + ((int64_t)t * k + j) * width;
            for (int64_t i = 0; i < width; i++)
                o[i] += wj * yj[i];
        }
    }
    return LLM_OK;
}

static llm_status cpu_scale(struct llm_backend *b, float *x, float s, int64_t m)
{
    (void)b;
    for (int64_t i = 0; i < m; i++)
        x[i] *= s;
    return LLM_OK;
}

static llm_status cpu_add(struct llm_backend *b, float *x, const float *y, int64_t m)
{
    (void)b;
    for (int64_t i = 0; i < m; i++)
        x[i] += y[i];
    return LLM_OK;
}

static llm_status cpu_gather(struct llm_backend *b, const float *x, const int32_t *perm, float *y,
                             int32_t n, int64_t width)
{
    (void)b;
    for (int32_t t = 0; t < n; t++) {
        const float *xr = x + (int64_t)t * width;
        float *yr = y + (int64_t)t * width;
        for (int64_t i = 0; i < width; i++)
            yr[i] = xr[perm[i]];
    }
    return LLM_OK;
}

static const struct llm_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .host_run = cpu_host_run,
    .threads = cpu_threads,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .download = cpu_download,
    .upload = cpu_download, /* host memory both ways: a copy */
    .bind = cpu_bind,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .kv_copy = cpu_kv_copy,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .geglu = cpu_geglu,
    .scale = cpu_scale,
    .get_rows = cpu_get_rows,
    .set_rows = cpu_set_rows,
    .combine = cpu_combine,
    .add = cpu_add,
    .gather = cpu_gather,
};

llm_status llm_backend_cpu_new(struct llm_backend **out, int n_threads, int repack)
{
    *out = NULL;
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    if (n_threads > 63)
        n_threads = 63;
    struct cpu_backend *cb = llm_calloc(1, sizeof *cb);
    if (!cb)
        return LLM_E_NOMEM;
    llm_status s = llm_pool_new(&cb->pool, n_threads);
    if (s) {
        llm_free(cb);
        return s;
    }
    cb->base.ops = &cpu_ops;
    cb->repack = repack;
    cb->base.n_threads = n_threads;
    *out = &cb->base;
    return LLM_OK;
}
