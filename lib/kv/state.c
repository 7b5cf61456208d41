/* state.c: KV state files (state.h): one pass to write, one to read. */
#include "state.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "../common/alloc.h"
#include "../common/bytes.h"
#include "../common/io.h"

#define HEADER_BYTES 96
#define RECORD_HEAD 16
/* A record larger than this is a damaged header's claim. */
#define RECORD_MAX ((uint64_t)1 << 30)
static const char magic[8] = { 'L', 'L', 'M', 'S', 'T', 'A', 'T', 'E' };
static const char end_magic[8] = { 'L', 'L', 'M', 'S', 'T', 'E', 'N', 'D' };

static void putf(uint8_t *p, float v) { memcpy(p, &v, 4); }
static float getf(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }


/* Bytes of the KV record of n rows. q4ch keys (kv.h) are stored by blocks,
 * the chunk being the block size: a full chunk holds its quantized block, a
 * shorter one (the last) its keys' fp16 rows. */
static uint64_t rows_bytes(const struct llm_state_info *in, int32_t n)
{
    const uint64_t k = in->kv_type_k == LLM_TYPE_Q4Z_CH && n < in->chunk
                       ? (uint64_t)in->kv_dim * 2
                       : llm_kv_row_bytes(in->kv_type_k, in->kv_dim, in->chunk);
    return (uint64_t)in->n_layers * (uint64_t)n *
           (k + llm_kv_row_bytes(in->kv_type_v, in->kv_dim, in->chunk));
}

/* The largest KV record. */
static uint64_t rows_max(const struct llm_state_info *in)
{
    const uint64_t a = rows_bytes(in, in->chunk), b = rows_bytes(in, in->chunk - 1);
    return a > b ? a : b;
}

static void header_encode(uint8_t *h, const struct llm_state_info *in)
{
    memset(h, 0, HEADER_BYTES);
    memcpy(h, magic, 8);
    llm_put32(h + 8, LLM_STATE_VERSION);
    /* flags: bit 0 compressed, bits 8-31 window_from (below 2^24 tokens) */
    llm_put32(h + 12, (in->compress ? 1u : 0u) | (uint32_t)in->window_from << 8);
    llm_put64(h + 16, in->model_id);
    llm_put32(h + 24, (uint32_t)in->kv_type_k | (uint32_t)in->kv_type_v << 16);
    llm_put32(h + 28, (uint32_t)in->n_layers);
    llm_put32(h + 32, (uint32_t)in->kv_dim);
    llm_put32(h + 36, (uint32_t)in->n_vocab);
    llm_put32(h + 40, (uint32_t)in->n_tokens);
    llm_put32(h + 44, (uint32_t)in->chunk);
    const struct llm_sampler_params *sp = &in->sp;
    putf(h + 48, sp->temp);
    llm_put32(h + 52, (uint32_t)sp->top_k);
    putf(h + 56, sp->top_p);
    putf(h + 60, sp->min_p);
    putf(h + 64, sp->repeat_penalty);
    putf(h + 68, sp->presence_penalty);
    putf(h + 72, sp->frequency_penalty);
    llm_put32(h + 76, (uint32_t)sp->penalty_last_n);
    llm_put64(h + 80, sp->seed);
    llm_put64(h + 88, XXH3_64bits(h, 88));
}

/* The header's values, checked: ranges as llm-run's options allow. */
static llm_status header_decode(const uint8_t *h, const char *path, struct llm_state_info *in)
{
    if (memcmp(h, magic, 8))
        return llm_error_set(LLM_E_FORMAT, "%s: not a KV state file (no LLMSTATE magic)", path);
    if (!llm_sum_ok(XXH3_64bits(h, 88), llm_get64(h + 88)))
        return llm_error_set(LLM_E_CHECKSUM, "%s: the state's header checksum does not match "
                             "(a damaged file)", path);
    const uint32_t version = llm_get32(h + 8);
    if (version < 1 || version > LLM_STATE_VERSION)
        return llm_error_set(LLM_E_FORMAT, "%s: KV state version %u (this build reads 1 to %u)",
                             path, version, LLM_STATE_VERSION);
    uint32_t flags = llm_get32(h + 12), type = llm_get32(h + 24), layers = llm_get32(h + 28),
             kvd = llm_get32(h + 32), vocab = llm_get32(h + 36), ntok = llm_get32(h + 40),
             chunk = llm_get32(h + 44);
    memset(in, 0, sizeof *in);
    /* version 1: one type for K and V */
    in->kv_type_k = (enum llm_type)(version == 1 ? type : type & 0xffff);
    in->kv_type_v = (enum llm_type)(version == 1 ? type : type >> 16);
    const uint32_t wfrom = version >= 3 ? flags >> 8 : 0;
    if (version >= 3)
        flags &= 0xff;
    const char *bad = flags > 1 ? "unknown flags"
                      : !llm_kv_type_ok(in->kv_type_k, kvd) || !llm_kv_type_ok(in->kv_type_v, kvd) ||
                        in->kv_type_v == LLM_TYPE_Q4Z_CH
                      ? "a KV type other than f32, f16, bf16, q8, fp8_e4m3, q4 and q4ch, or a "
                        "row it cannot fill"
                      : !layers || layers > LLM_STATE_MAX_LAYERS ? "a bad layer count"
                      : !kvd || kvd > LLM_STATE_MAX_KVDIM ? "a bad KV row width"
                      : !vocab || vocab > LLM_STATE_MAX_VOCAB ? "a bad vocabulary size"
                      : !ntok || ntok > LLM_STATE_MAX_TOKENS ? "a bad token count"
                      : wfrom > ntok ? "window rows from past its tokens"
                      : !chunk || chunk > LLM_STATE_MAX_CHUNK ||
                        llm_kv_types_why_not(in->kv_type_k, in->kv_type_v, (int32_t)chunk, kvd)
                      ? "a bad chunk size" : NULL;
    if (bad)
        return llm_error_set(LLM_E_FORMAT, "%s: the state's header has %s", path, bad);
    in->compress = (int)(flags & 1);
    in->model_id = llm_get64(h + 16);
    in->n_layers = (int32_t)layers;
    in->kv_dim = (int32_t)kvd;
    in->n_vocab = (int32_t)vocab;
    in->n_tokens = (int32_t)ntok;
    in->chunk = (int32_t)chunk;
    in->window_from = (int32_t)wfrom;
    struct llm_sampler_params *sp = &in->sp;
    sp->temp = getf(h + 48);
    sp->top_k = (int32_t)llm_get32(h + 52);
    sp->top_p = getf(h + 56);
    sp->min_p = getf(h + 60);
    sp->repeat_penalty = getf(h + 64);
    sp->presence_penalty = getf(h + 68);
    sp->frequency_penalty = getf(h + 72);
    sp->penalty_last_n = (int32_t)llm_get32(h + 76);
    sp->seed = llm_get64(h + 80);
    /* written as comparisons that NaN fails */
    int ok = sp->temp >= 0 && sp->temp <= 100 && sp->top_k >= 0 && sp->top_p > 0 &&
             sp->top_p <= 1 && sp->min_p >= 0 && sp->min_p <= 1 && sp->repeat_penalty >= 1e-3f &&
             sp->repeat_penalty <= 100 && sp->presence_penalty >= -100 &&
             sp->presence_penalty <= 100 && sp->frequency_penalty >= -100 &&
             sp->frequency_penalty <= 100 && sp->penalty_last_n >= -1 &&
             sp->penalty_last_n <= (1 << 20);
    if (!ok)
        return llm_error_set(LLM_E_FORMAT, "%s: the state's sampler parameters are out of range",
                             path);
    if (rows_max(in) > RECORD_MAX)
        return llm_error_set(LLM_E_FORMAT, "%s: the state's KV records would be %llu bytes each",
                             path, (unsigned long long)rows_max(in));
    return LLM_OK;
}

/* ---- writing ------------------------------------------------------------- */


struct writer {
    struct llm_out o;
    uint8_t *mem;               /* (mlen, room for mcap) when written to memory */
    size_t mlen, mcap;
    int to_mem;
    const struct llm_state_info *in;
    void *zbuf;                 /* (zcap) compressed bytes */
    size_t zcap;
    uint32_t index;             /* of the next record */
};

static llm_status put(struct writer *w, const void *p, size_t n)
{
    if (!w->to_mem)
        return llm_out_write(&w->o, p, n);
    void *m = w->mem;
    LLM_TRY(llm_grow(&m, &w->mcap, w->mlen + n, 1));
    w->mem = m;
    memcpy(w->mem + w->mlen, p, n);
    w->mlen += n;
    return LLM_OK;
}

static llm_status put_record(struct writer *w, const void *raw, size_t n)
{
    uint8_t head[RECORD_HEAD];
    const void *stored = raw;
    size_t sn = n;
    if (w->in->compress && n) {
        size_t bound = ZSTD_compressBound(n);
        LLM_TRY(llm_grow(&w->zbuf, &w->zcap, bound, 1));
        size_t c = ZSTD_compress(w->zbuf, bound, raw, n, 1);
        if (ZSTD_isError(c))
            return llm_error_set(LLM_E_IO, "zstd: %s", ZSTD_getErrorName(c));
        if (c < n)
            stored = w->zbuf, sn = c;
    }
    llm_put32(head, (uint32_t)n);
    llm_put32(head + 4, (uint32_t)sn);
    llm_put64(head + 8, XXH3_64bits_withSeed(raw, n, w->index++));
    LLM_TRY(put(w, head, sizeof head));
    return put(w, stored, sn);
}

/* The state through w (opened: a file, or memory). */
static llm_status write_state(struct writer *w, const char *path, const struct llm_state_info *in,
                              const int32_t *tokens, const float *logits,
                              llm_state_rows_fn rows, void *ctx)
{
    if (!llm_kv_type_ok(in->kv_type_k, in->kv_dim) || !llm_kv_type_ok(in->kv_type_v, in->kv_dim) ||
        in->n_tokens < 1 || in->chunk < 1 ||
        in->chunk > LLM_STATE_MAX_CHUNK || in->n_tokens > LLM_STATE_MAX_TOKENS ||
        llm_kv_types_why_not(in->kv_type_k, in->kv_type_v, in->chunk, in->kv_dim) ||
        rows_max(in) > RECORD_MAX)
        return llm_error_set(LLM_E_INVALID, "%s: a KV state of these sizes cannot be written",
                             path);
    w->in = in;
    uint8_t h[HEADER_BYTES];
    header_encode(h, in);
    void *buf = llm_malloc((size_t)rows_max(in));
    if (!buf)
        return LLM_E_NOMEM;
    llm_status s = put(w, h, sizeof h);
    if (!s)
        s = put_record(w, tokens, (size_t)in->n_tokens * sizeof(int32_t));
    if (!s)
        s = put_record(w, logits, (size_t)in->n_vocab * sizeof(float));
    for (int32_t pos = 0; !s && pos < in->n_tokens; pos += in->chunk) {
        int32_t n = in->n_tokens - pos < in->chunk ? in->n_tokens - pos : in->chunk;
        s = rows(ctx, pos, n, buf);
        if (!s)
            s = put_record(w, buf, (size_t)rows_bytes(in, n));
    }
    if (!s)
        s = put(w, end_magic, sizeof end_magic);
    llm_free(buf);
    llm_free(w->zbuf);
    return s;
}

llm_status llm_state_write(const char *path, const struct llm_state_info *in,
                           const int32_t *tokens, const float *logits, llm_state_rows_fn rows,
                           void *ctx)
{
    struct writer w = { 0 };
    LLM_TRY(llm_out_open(&w.o, path));
    llm_status s = write_state(&w, path, in, tokens, logits, rows, ctx);
    if (s) {
        llm_out_abort(&w.o);
        return s;
    }
    return llm_out_commit(&w.o);
}

llm_status llm_state_write_mem(void **buf, size_t *len, const struct llm_state_info *in,
                               const int32_t *tokens, const float *logits,
                               llm_state_rows_fn rows, void *ctx)
{
    struct writer w = { .to_mem = 1 };
    *buf = NULL;
    *len = 0;
    llm_status s = write_state(&w, "state", in, tokens, logits, rows, ctx);
    if (s) {
        llm_free(w.mem);
        return s;
    }
    *buf = w.mem;
    *len = w.mlen;
    return LLM_OK;
}

/* ---- reading ------------------------------------------------------------- */

struct llm_state_reader {
    FILE *f;
    int own;                    /* fclose on close (not stdin) */
    char *path;
    struct llm_state_info in;
    void *zbuf;                 /* (zcap) stored bytes of a compressed record */
    size_t zcap;
    void *rbuf;                 /* (rcap) the raw bytes of a KV record */
    size_t rcap;
    uint32_t index;
};


/* n bytes, or an error saying where the input ended. */
static llm_status get_bytes(struct llm_state_reader *r, void *p, size_t n, const char *what)
{
    if (n && fread(p, 1, n, r->f) != n) {
        if (ferror(r->f))
            return llm_error_set(LLM_E_IO, "%s: read error: %s", r->path, strerror(errno));
        return llm_error_set(LLM_E_FORMAT, "%s: the state ends early, in %s (a cut file)",
                             r->path, what);
    }
    return LLM_OK;
}

llm_status llm_state_open(struct llm_state_reader **out, const char *path,
                          struct llm_state_info *info)
{
    *out = NULL;
    if (!strcmp(path, "-"))
        return llm_state_open_stream(out, stdin, "<stdin>", 0, info);
    FILE *f = fopen(path, "rb");
    if (!f)
        return llm_error_set(errno == ENOENT ? LLM_E_NOTFOUND : LLM_E_IO, "%s: %s", path,
                             strerror(errno));
    return llm_state_open_stream(out, f, path, 1, info);
}

llm_status llm_state_open_stream(struct llm_state_reader **out, FILE *f, const char *name,
                                 int own, struct llm_state_info *info)
{
    *out = NULL;
    struct llm_state_reader *r = llm_calloc(1, sizeof *r);
    if (!r || !(r->path = llm_strdup(name))) {
        llm_free(r);
        if (own)
            fclose(f);
        return LLM_E_NOMEM;
    }
    r->f = f;
    r->own = own;
    const char *path = name;
    uint8_t h[HEADER_BYTES];
    llm_status s = get_bytes(r, h, sizeof h, "the header");
    if (!s)
        s = header_decode(h, path, &r->in);
    if (s) {
        llm_state_close(r);
        return s;
    }
    *info = r->in;
    *out = r;
    return LLM_OK;
}

/* The next record, of raw size n, into raw (NULL: r->rbuf, grown once its
 * head is read, so that a header's claim costs no memory before the bytes
 * are there). */
static llm_status get_record(struct llm_state_reader *r, void *raw, size_t n, const char *what)
{
    uint8_t head[RECORD_HEAD];
    LLM_TRY(get_bytes(r, head, sizeof head, what));
    uint32_t rn = llm_get32(head), sn = llm_get32(head + 4);
    if (rn != n || sn > rn || (!r->in.compress && sn != rn) || (!sn && rn))
        return llm_error_set(LLM_E_FORMAT, "%s: %s: a record of %u bytes stored in %u, where "
                             "%zu are expected", r->path, what, rn, sn, n);
    if (!raw) {
        LLM_TRY(llm_grow(&r->rbuf, &r->rcap, n, 1));
        raw = r->rbuf;
    }
    if (sn == rn) {
        LLM_TRY(get_bytes(r, raw, n, what));
    } else {
        LLM_TRY(llm_grow(&r->zbuf, &r->zcap, sn, 1));
        LLM_TRY(get_bytes(r, r->zbuf, sn, what));
        size_t got = ZSTD_decompress(raw, n, r->zbuf, sn);
        if (ZSTD_isError(got) || got != n)
            return llm_error_set(LLM_E_FORMAT, "%s: %s: the compressed record is damaged%s%s",
                                 r->path, what, ZSTD_isError(got) ? ": " : "",
                                 ZSTD_isError(got) ? ZSTD_getErrorName(got) : "");
    }
    if (!llm_sum_ok(XXH3_64bits_withSeed(raw, n, r->index++), llm_get64(head + 8)))
        return llm_error_set(LLM_E_CHECKSUM, "%s: %s: the checksum does not match (a damaged "
                             "file)", r->path, what);
    return LLM_OK;
}

llm_status llm_state_read_tokens(struct llm_state_reader *r, int32_t *tokens, float *logits)
{
    const struct llm_state_info *in = &r->in;
    LLM_TRY(get_record(r, tokens, (size_t)in->n_tokens * sizeof(int32_t), "the tokens"));
    for (int32_t i = 0; i < in->n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= in->n_vocab)
            return llm_error_set(LLM_E_FORMAT, "%s: token %d of the state is %d, outside the "
                                 "vocabulary of %d", r->path, i, tokens[i], in->n_vocab);
    return get_record(r, logits, (size_t)in->n_vocab * sizeof(float), "the logits");
}

llm_status llm_state_read_rows(struct llm_state_reader *r, llm_state_rows_fn rows, void *ctx)
{
    const struct llm_state_info *in = &r->in;
    if (r->index != 2)
        return llm_error_set(LLM_E_INVALID, "%s: the state's rows are read after its tokens",
                             r->path);
    llm_status s = LLM_OK;
    for (int32_t pos = 0; !s && pos < in->n_tokens; pos += in->chunk) {
        int32_t n = in->n_tokens - pos < in->chunk ? in->n_tokens - pos : in->chunk;
        char what[64];
        snprintf(what, sizeof what, "the KV rows of positions %d-%d", pos, pos + n - 1);
        s = get_record(r, NULL, (size_t)rows_bytes(in, n), what);
        if (!s && rows)
            s = rows(ctx, pos, n, r->rbuf);
    }
    uint8_t e[sizeof end_magic + 1];
    if (!s)
        s = get_bytes(r, e, sizeof end_magic, "the end mark");
    if (!s && memcmp(e, end_magic, sizeof end_magic))
        s = llm_error_set(LLM_E_FORMAT, "%s: no end mark after the KV rows (a damaged file)",
                          r->path);
    if (!s && fread(e, 1, 1, r->f) != 0)
        s = llm_error_set(LLM_E_FORMAT, "%s: bytes follow the state's end mark", r->path);
    return s;
}

void llm_state_close(struct llm_state_reader *r)
{
    if (!r)
        return;
    if (r->own)
        fclose(r->f);
    llm_free(r->zbuf);
    llm_free(r->rbuf);
    llm_free(r->path);
    llm_free(r);
}

llm_status llm_state_expect(const struct llm_state_info *got, const struct llm_state_info *want,
                            const char *path)
{
    if (got->model_id != want->model_id)
        return llm_error_set(LLM_E_INVALID, "%s: the state was computed by another model "
                             "(identity %016llx, this model's is %016llx)", path,
                             (unsigned long long)got->model_id,
                             (unsigned long long)want->model_id);
    if (got->n_layers != want->n_layers || got->kv_dim != want->kv_dim ||
        got->n_vocab != want->n_vocab)
        return llm_error_set(LLM_E_INVALID, "%s: the state's shape (%d layers, KV rows of %d, "
                             "vocabulary %d) is not this model's (%d, %d, %d)", path,
                             got->n_layers, got->kv_dim, got->n_vocab, want->n_layers,
                             want->kv_dim, want->n_vocab);
    if (got->kv_type_k != want->kv_type_k || got->kv_type_v != want->kv_type_v) {
        char g[64], w[64];
        const char *k = llm_kv_type_name(got->kv_type_k), *v = llm_kv_type_name(got->kv_type_v);
        llm_kv_types_text(g, sizeof g, got->kv_type_k, got->kv_type_v);
        llm_kv_types_text(w, sizeof w, want->kv_type_k, want->kv_type_v);
        if (got->kv_type_k == got->kv_type_v)
            return llm_error_set(LLM_E_INVALID, "%s: the state holds %s KV rows, this run's "
                                 "cache is %s (--kv-type %s)", path, g, w, k);
        if (got->kv_type_k == LLM_TYPE_Q4Z_CH && got->kv_type_v == LLM_TYPE_Q4_0)
            return llm_error_set(LLM_E_INVALID, "%s: the state holds %s rows, this run's cache is "
                                 "%s (--kv-type q4ch)", path, g, w);
        return llm_error_set(LLM_E_INVALID, "%s: the state holds %s rows, this run's cache is %s "
                             "(--kv-type-k %s --kv-type-v %s)", path, g, w, k, v);
    }
    if (got->kv_type_k == LLM_TYPE_Q4Z_CH && got->chunk != want->chunk)
        return llm_error_set(LLM_E_INVALID, "%s: the state's q4ch keys are in blocks of %d, this "
                             "run's cache has blocks of %d (--block-size %d)", path, got->chunk,
                             want->chunk, got->chunk);
    return LLM_OK;
}
