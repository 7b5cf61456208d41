/* convert.c: change the type of weight matrices on demand, and detect and
 * open any supported input format. */
#include <string.h>

#include "../common/alloc.h"
#include "../quant/quant.h"
#include "import.h"

/* The original tensor, kept by value: f->tensors may move as tensors are
 * added, and the original data pointer / fill / stored bytes stay valid. */
struct convert_ctx {
    struct llm_file *f;
    struct llm_tensor src;
};

static llm_status convert_fill(const struct llm_tensor *t, void *dst, void *ctx)
{
    struct convert_ctx *c = ctx;
    const void *src;
    void *tmp = NULL;
    LLM_TRY(llm_tensor_peek(c->f, &c->src, &src)); /* the source is checked at its first use */
    if (!src) {
        if (c->src.nbytes > SIZE_MAX || !(tmp = llm_malloc((size_t)c->src.nbytes)))
            return LLM_E_NOMEM;
        llm_status s = llm_tensor_read(c->f, &c->src, tmp);
        if (s) {
            llm_free(tmp);
            return s;
        }
        src = tmp;
    }
    llm_status s = llm_convert_rows(c->src.type, src, t->type, dst, t->ne[0], llm_tensor_nrows(t));
    llm_free(tmp);
    return s;
}

static int is_weight_matrix(const struct llm_tensor *t)
{
    size_t n = strlen(t->name);
    return !(t->flags & LLM_TENSOR_AUX) && t->n_dims >= 2 && n > 7 &&
           strcmp(t->name + n - 7, ".weight") == 0;
}

llm_status llm_file_convert(struct llm_file *f, enum llm_type type)
{
    const struct llm_type_traits *tr = llm_type_traits(type);
    if (!tr || tr->is_aux)
        return llm_error_set(LLM_E_INVALID, "cannot convert to type %u", (unsigned)type);
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *t = &f->tensors[i];
        if (!is_weight_matrix(t) || t->type == type)
            continue;
        struct convert_ctx *c = llm_calloc(1, sizeof *c);
        if (!c)
            return LLM_E_NOMEM;
        c->f = f;
        c->src = *t;
        LLM_TRY(llm_file_own(f, c));
        uint64_t nbytes;
        LLM_TRY(llm_type_tensor_bytes(type, t->n_dims, t->ne, &nbytes));
        t->type = type;
        t->nbytes = nbytes;
        t->data = NULL;
        t->stored = NULL;
        t->compression = LLM_COMPRESS_NONE;
        t->checked = 1; /* what matters is its source, checked when convert_fill reads it */
        t->fill = convert_fill;
        t->fill_ctx = c;
    }
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* format detection */

/* llama2.c keeps its tokenizer in a separate file whose size depends on
 * the model's vocabulary size. */
static llm_status load_l2c_tokenizer(struct llm_file *f, const char *path)
{
    int64_t n;
    if (llm_meta_get_i64(f->meta, "hparams.vocab_size", &n) || n <= 0 || n > UINT32_MAX)
        return llm_error_set(LLM_E_FORMAT, "%s: no vocabulary size", f->path);
    struct llm_map m;
    LLM_TRY(llm_small_map(&m, path, LLM_TOKENIZER_MAX));
    llm_status s = llm_llama2c_tokenizer_parse(f, m.data, m.size, path, (uint32_t)n);
    if (s) {
        llm_map_close(&m);
        return s;
    }
    return llm_file_add_map(f, &m);
}

llm_status llm_import(struct llm_file **out, const char *path, const struct llm_import_opts *o)
{
    struct llm_import_opts def;
    if (!o) {
        llm_import_opts_default(&def);
        o = &def;
    }
    if (strcmp(path, "-") != 0 && llm_is_dir(path))
        return llm_hf_open(out, path, o);
    /* Map once (a pipe can be read only once), then look at the bytes. */
    struct llm_map m;
    LLM_TRY(llm_model_map(&m, path));
    const char *name = strcmp(path, "-") ? path : "<stdin>";
    const uint8_t *d = m.data;
    llm_status s;
    uint32_t magic = 0;
    *out = NULL;
    if (m.size >= 4)
        memcpy(&magic, d, 4);
    if (m.size >= 8 && memcmp(d, "\x89LLM\r\n\x1a\n", 8) == 0)
        s = llm_llm_parse(out, d, m.size, name, o);
    else if (m.size >= 4 && memcmp(d, "GGUF", 4) == 0)
        s = llm_gguf_parse(out, d, m.size, name, o);
    else if (m.size >= 9 && d[8] == '{')
        s = llm_safetensors_parse(out, d, m.size, name, o);
    else if (magic == 0x616b3432 || m.size >= 28) {
        s = llm_llama2c_parse(out, d, m.size, name, o);
        if (!s && o->tokenizer_path && !llm_file_find(*out, "tokenizer.tokens"))
            s = load_l2c_tokenizer(*out, o->tokenizer_path);
        if (s && *out) {
            llm_file_free(*out);
            *out = NULL;
        }
    }
    else
        s = llm_error_set(LLM_E_FORMAT, "%s: unknown format (not .llm, GGUF, safetensors or llama2.c)",
                          name);
    if (s) {
        llm_map_close(&m);
        return s;
    }
    s = llm_file_add_map(*out, &m);
    if (s) {
        llm_file_free(*out);
        return s;
    }
    return LLM_OK;
}
