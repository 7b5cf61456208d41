/* spm.c: a minimal reader of SentencePiece ModelProto files
 * (tokenizer.model, proto2; formats.md §3.9): pieces, scores and types,
 * the special ids of trainer_spec and add_dummy_prefix. */
#include <stdint.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "file.h"
#include "import.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

struct pb {
    const uint8_t *p, *end;
};

struct pb_field {
    uint32_t num, wt;
    uint64_t v;           /* VARINT, I64, I32 */
    const uint8_t *data;  /* LEN: (len) bytes */
    uint64_t len;
};

static int pb_varint(struct pb *b, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (b->p >= b->end)
            return 0;
        uint8_t c = *b->p++;
        v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0; /* longer than 10 bytes */
}

/* The next field of a message; 0 at the end, 1 for a field, -1 on a
 * malformed record (the detail is set by the caller, which knows where). */
static int pb_next(struct pb *b, struct pb_field *f)
{
    if (b->p >= b->end)
        return 0;
    uint64_t key;
    if (!pb_varint(b, &key) || key >> 35 || (key >> 3) == 0)
        return -1;
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    size_t left;
    switch (f->wt) {
    case WT_VARINT:
        return pb_varint(b, &f->v) ? 1 : -1;
    case WT_I64:
    case WT_I32: {
        size_t n = f->wt == WT_I64 ? 8 : 4;
        if ((size_t)(b->end - b->p) < n)
            return -1;
        f->v = 0;
        for (size_t i = n; i-- > 0;)
            f->v = f->v << 8 | b->p[i];
        b->p += n;
        return 1;
    }
    case WT_LEN:
        if (!pb_varint(b, &f->len))
            return -1;
        left = (size_t)(b->end - b->p);
        if (f->len > left)
            return -1;
        f->data = b->p;
        b->p += f->len;
        return 1;
    default: /* groups (3, 4) are not used by this schema */
        return -1;
    }
}

struct spm_spec {
    int64_t model_type, vocab_size;
    int byte_fallback;
    int32_t unk_id, bos_id, eos_id, pad_id;
    int add_dummy_prefix;
};

static llm_status bad(const char *name, const char *what)
{
    return llm_error_set(LLM_E_FORMAT, "%s: malformed SentencePiece model: %s", name, what);
}

static llm_status parse_trainer(const uint8_t *d, uint64_t len, const char *name,
                                struct spm_spec *sp)
{
    struct pb b = { d, d + len };
    struct pb_field f;
    int r;
    while ((r = pb_next(&b, &f)) > 0) {
        if (f.num == 3 || f.num == 4 || f.num == 35 || (f.num >= 40 && f.num <= 43)) {
            if (f.wt != WT_VARINT)
                return bad(name, "trainer_spec field with the wrong wire type");
            /* int32 fields: negative values are 64-bit sign-extended varints */
            int32_t v = (int32_t)(uint32_t)f.v;
            switch (f.num) {
            case 3: sp->model_type = v; break;
            case 4: sp->vocab_size = v; break;
            case 35: sp->byte_fallback = f.v != 0; break;
            case 40: sp->unk_id = v; break;
            case 41: sp->bos_id = v; break;
            case 42: sp->eos_id = v; break;
            case 43: sp->pad_id = v; break;
            }
        }
    }
    return r < 0 ? bad(name, "truncated or invalid trainer_spec") : LLM_OK;
}

static llm_status parse_normalizer(const uint8_t *d, uint64_t len, const char *name,
                                   struct spm_spec *sp)
{
    struct pb b = { d, d + len };
    struct pb_field f;
    int r;
    while ((r = pb_next(&b, &f)) > 0) {
        if (f.num == 3) {
            if (f.wt != WT_VARINT)
                return bad(name, "normalizer_spec field with the wrong wire type");
            sp->add_dummy_prefix = f.v != 0;
        }
    }
    return r < 0 ? bad(name, "truncated or invalid normalizer_spec") : LLM_OK;
}

static llm_status parse_piece(const uint8_t *d, uint64_t len, const char *name, uint32_t id,
                              const char **tok, uint32_t *tlen, float *score, int32_t *type)
{
    struct pb b = { d, d + len };
    struct pb_field f;
    int r;
    *tok = "";
    *tlen = 0;
    *score = 0.0f;
    *type = 1; /* NORMAL, the proto2 default that writers omit */
    while ((r = pb_next(&b, &f)) > 0) {
        if (f.num == 1) {
            if (f.wt != WT_LEN || f.len > UINT32_MAX)
                return llm_error_set(LLM_E_FORMAT, "%s: piece %u: bad piece text", name, id);
            *tok = (const char *)f.data;
            *tlen = (uint32_t)f.len;
        } else if (f.num == 2) {
            if (f.wt != WT_I32)
                return llm_error_set(LLM_E_FORMAT, "%s: piece %u: score is not a float", name, id);
            *score = llm_bits_f32((uint32_t)f.v);
        } else if (f.num == 3) {
            if (f.wt != WT_VARINT || f.v < 1 || f.v > 6)
                return llm_error_set(LLM_E_FORMAT, "%s: piece %u: bad type", name, id);
            *type = (int32_t)f.v;
        }
    }
    if (r < 0)
        return llm_error_set(LLM_E_FORMAT, "%s: piece %u: truncated or invalid", name, id);
    return LLM_OK;
}

static llm_status set_meta(struct llm_file *f, const struct spm_spec *sp, uint32_t n)
{
    struct llm_meta *m = f->meta;
    LLM_TRY(llm_meta_set_str(m, "tokenizer.model", "llama"));
    LLM_TRY(llm_meta_set_str(m, "tokenizer.pre", "default"));
    LLM_TRY(llm_meta_set_i64(m, "tokenizer.n_tokens", n));
    const struct { const char *key; int32_t id; } ids[] = {
        { "tokenizer.unk_id", sp->unk_id },
        { "tokenizer.bos_id", sp->bos_id },
        { "tokenizer.eos_id", sp->eos_id },
        { "tokenizer.pad_id", sp->pad_id },
    };
    /* SentencePiece disables a special token with id -1. */
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        llm_meta_del(m, ids[i].key);
        if (ids[i].id >= 0 && (uint32_t)ids[i].id < n)
            LLM_TRY(llm_meta_set_i64(m, ids[i].key, ids[i].id));
    }
    LLM_TRY(llm_meta_set_bool(m, "tokenizer.add_space_prefix", sp->add_dummy_prefix));
    return LLM_OK;
}

llm_status llm_spm_parse(struct llm_file *f, const uint8_t *data, size_t size, const char *name)
{
    struct spm_spec sp = { .model_type = 1, .vocab_size = 8000, .unk_id = 0, .bos_id = 1,
                           .eos_id = 2, .pad_id = -1, .add_dummy_prefix = 1 };
    struct pb b = { data, data + size };
    struct pb_field fl;
    uint64_t n = 0;
    int r;
    /* First pass: count pieces and read the specs. */
    while ((r = pb_next(&b, &fl)) > 0) {
        if (fl.num == 1 || fl.num == 2 || fl.num == 3) {
            if (fl.wt != WT_LEN)
                return bad(name, "top-level field with the wrong wire type");
            if (fl.num == 1)
                n++;
            else if (fl.num == 2)
                LLM_TRY(parse_trainer(fl.data, fl.len, name, &sp));
            else
                LLM_TRY(parse_normalizer(fl.data, fl.len, name, &sp));
        }
    }
    if (r < 0)
        return bad(name, "truncated or invalid record");
    if (n == 0)
        return bad(name, "no pieces");
    if (n > UINT32_MAX - 1)
        return bad(name, "too many pieces");

    /* Every piece record takes at least 2 bytes, so n is bounded by size. */
    const char **tok = llm_calloc((size_t)n, sizeof *tok);
    uint32_t *len = llm_calloc((size_t)n, sizeof *len);
    float *score = llm_calloc((size_t)n, sizeof *score);
    int32_t *type = llm_calloc((size_t)n, sizeof *type);
    llm_status s = LLM_OK;
    if (!tok || !len || !score || !type) {
        s = LLM_E_NOMEM;
        goto out;
    }
    b.p = data;
    uint32_t i = 0;
    while (!s && pb_next(&b, &fl) > 0)
        if (fl.num == 1) {
            s = parse_piece(fl.data, fl.len, name, i, &tok[i], &len[i], &score[i], &type[i]);
            i++;
        }
    if (!s)
        s = llm_file_set_vocab(f, (uint32_t)n, tok, len, score, type);
    if (!s)
        s = set_meta(f, &sp, (uint32_t)n);
out:
    llm_free(tok);
    llm_free(len);
    llm_free(score);
    llm_free(type);
    return s;
}
