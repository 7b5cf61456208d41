/* kvstate.c: a context's sequence to and from a KV state file. */
#include "kvstate.h"

#include <string.h>

llm_status llm_kvstate_info(struct llm_context *c, struct llm_state_info *in)
{
    struct llm_model *m = llm_context_model(c);
    const struct llm_config *cf = llm_model_config(m);
    const struct llm_kv *kv = llm_context_kv(c);
    memset(in, 0, sizeof *in);
    LLM_TRY(llm_model_id(m, &in->model_id));
    /* LongRoPE's long factors (a context past the original length) rotate
     * keys otherwise: such a state is another model's to a short context */
    if (llm_context_rope_long(c))
        in->model_id ^= 0x4c6f6e67526f5045ull; /* "LongRoPE" */
    in->kv_type_k = kv->p.type_k;
    in->kv_type_v = kv->p.type_v;
    in->n_layers = cf->n_layers;
    in->kv_dim = (int32_t)kv->kv_dim;
    in->n_vocab = cf->n_vocab;
    in->chunk = kv->p.block_size < LLM_STATE_MAX_CHUNK ? kv->p.block_size : LLM_STATE_MAX_CHUNK;
    return LLM_OK;
}

struct rows_ctx {
    struct llm_context *c;
    int32_t slot, n;            /* load: positions below n go into the slot */
};

static llm_status rows_out(void *ctx, int32_t pos, int32_t n, void *rows)
{
    struct rows_ctx *r = ctx;
    return llm_context_kv_save(r->c, r->slot, pos, n, rows);
}

/* The info of a state of n tokens of c. */
static llm_status save_info(struct llm_context *c, int32_t slot, int32_t n,
                            const struct llm_sampler_params *sp, int compress,
                            struct llm_state_info *in)
{
    LLM_TRY(llm_kvstate_info(c, in));
    in->n_tokens = n;
    /* the window layers' rows below this are zeros (kv_rows_copy) */
    const int32_t from = llm_kv_window_from(llm_context_kv(c), slot);
    in->window_from = from < n ? from : n;
    in->sp = *sp;
    in->compress = compress;
    return LLM_OK;
}

llm_status llm_kvstate_save(struct llm_context *c, int32_t slot, const int32_t *tokens, int32_t n,
                            const float *logits, const struct llm_sampler_params *sp,
                            int compress, const char *path)
{
    struct llm_state_info in;
    LLM_TRY(save_info(c, slot, n, sp, compress, &in));
    struct rows_ctx r = { c, slot, n };
    return llm_state_write(path, &in, tokens, logits, rows_out, &r);
}

llm_status llm_kvstate_save_mem(struct llm_context *c, int32_t slot, const int32_t *tokens,
                                int32_t n, const float *logits,
                                const struct llm_sampler_params *sp, int compress, void **buf,
                                size_t *len)
{
    struct llm_state_info in;
    LLM_TRY(save_info(c, slot, n, sp, compress, &in));
    struct rows_ctx r = { c, slot, n };
    return llm_state_write_mem(buf, len, &in, tokens, logits, rows_out, &r);
}

/* The rows of a chunk: those below r->n are appended to the slot. */
static llm_status rows_in(void *ctx, int32_t pos, int32_t n, void *rows)
{
    struct rows_ctx *r = ctx;
    if (pos >= r->n)
        return LLM_OK;
    if (pos + n <= r->n)
        return llm_context_kv_load(r->c, r->slot, pos, n, rows);
    /* part of the chunk: its rows are (n_layers, 2, n, kv_dim); each run
     * of the first r->n - pos rows moves up to make (n_layers, 2, keep, kv_dim) */
    const struct llm_kv *kv = llm_context_kv(r->c);
    const int32_t keep = r->n - pos;
    const int q4ch = kv->p.type_k == LLM_TYPE_Q4Z_CH;
    if (q4ch && n == kv->p.block_size)
        return LLM_OK; /* a quantized block cannot be cut: the full blocks before it are kept */
    uint8_t *b = rows;
    size_t from = 0, to = 0;
    for (int32_t j = 0; j < kv->p.n_layers * 2; j++) {
        const size_t rb = j % 2 ? kv->row_bytes_v
                          : q4ch ? (size_t)kv->kv_dim * sizeof(uint16_t) /* the last block's fp16 rows */
                                 : kv->row_bytes_k;
        memmove(b + to, b + from, (size_t)keep * rb);
        from += (size_t)n * rb;
        to += (size_t)keep * rb;
    }
    return llm_context_kv_load(r->c, r->slot, pos, keep, rows);
}

llm_status llm_kvstate_load(struct llm_state_reader *rd, const struct llm_state_info *in,
                            struct llm_context *c, int32_t slot, int32_t n)
{
    struct llm_kv *kv = llm_context_kv(c);
    struct rows_ctx r = { c, slot, n < in->n_tokens ? n : in->n_tokens };
    /* a state without its window layers' early rows goes on only where this
     * cache never reads them: else nothing is loaded (computed again) */
    if (!llm_kv_window_reaches(kv, r.n, in->window_from))
        r.n = 0;
    llm_context_reset(c, slot);
    llm_status s = llm_state_read_rows(rd, rows_in, &r);
    if (!s)
        llm_kv_window_forget(kv, slot, in->window_from);
    if (s)
        llm_context_reset(c, slot);
    return s;
}
