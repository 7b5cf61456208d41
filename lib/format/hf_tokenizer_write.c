/* hf_tokenizer_write.c: a model's tokenizer as Hugging Face files, for the
 * GPTQ/AWQ exporter (formats.md 3.6-3.9): SentencePiece-style vocabularies
 * ("llama") as tokenizer.model, byte-level BPE ("gpt2") as tokenizer.json,
 * and tokenizer_config.json for both. What hf_tokenizer.c reads back is the
 * same vocabulary (tokens, scores, types, merges) and special ids. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/fp16.h"
#include "../common/io.h"
#include "file.h"
#include "hf.h"
#include "hf_quant.h"

/* GGUF / SentencePiece token types (formats.md 2.3, 3.9). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* The split regexes of the pre-tokenizers that have a llama.cpp name
 * (formats.md 2.4); hf_tokenizer.c recognises them by these exact texts. */
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int32_t tok_type(const struct llm_vocab_view *v, uint32_t i)
{
    return v->types ? v->types[i] : TT_NORMAL;
}

static int64_t meta_id(const struct llm_file *f, const char *key, uint32_t n)
{
    int64_t id;
    if (llm_meta_get_i64(f->meta, key, &id) != LLM_OK || id < 0 || id >= n) {
        llm_error_clear();
        return -1;
    }
    return id;
}

static int meta_flag(const struct llm_file *f, const char *key, int def)
{
    int v;
    if (llm_meta_get_bool(f->meta, key, &v) != LLM_OK) {
        llm_error_clear();
        return def;
    }
    return v;
}

static llm_status write_bytes(const char *dir, const char *file, const void *p, size_t n)
{
    char path[4096];
    LLM_TRY(llm_hf_path(path, sizeof path, dir, file));
    struct llm_out o;
    LLM_TRY(llm_out_open(&o, path));
    llm_status s = llm_out_write(&o, p, n);
    if (s) {
        llm_out_abort(&o);
        return s;
    }
    return llm_out_commit(&o);
}

static llm_status write_json(const char *dir, const char *file, const json_t *j)
{
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    if (!text)
        return llm_error_set(LLM_E_NOMEM, "%s: cannot serialize %s", dir, file);
    size_t n = strlen(text);
    char *t = llm_realloc(text, n + 2);
    llm_status s = LLM_E_NOMEM;
    if (t) {
        t[n] = '\n';
        s = write_bytes(dir, file, t, n + 1);
        text = t;
    }
    free(text);
    return s;
}

static llm_status jset(json_t *o, const char *k, json_t *v)
{
    if (!v || json_object_set_new(o, k, v) != 0)
        return llm_error_set(LLM_E_NOMEM, "out of memory (tokenizer files)");
    return LLM_OK;
}

/* A token's text as a JSON string; LLM_E_UNSUPPORTED when it is not UTF-8. */
static llm_status jtoken(const struct llm_vocab_view *v, uint32_t i, json_t **out)
{
    const char *s = (const char *)v->bytes + v->offsets[i];
    *out = json_stringn(s, v->offsets[i + 1] - v->offsets[i]);
    if (!*out)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "token %u is not valid UTF-8 (no tokenizer.json form)", i);
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* tokenizer.model (proto2 ModelProto) */

struct pbw {
    uint8_t *b;
    size_t n, cap;
};

static llm_status pb_put(struct pbw *w, const void *p, size_t n)
{
    LLM_TRY(llm_grow((void **)&w->b, &w->cap, w->n + n, 1));
    memcpy(w->b + w->n, p, n);
    w->n += n;
    return LLM_OK;
}

static llm_status pb_varint(struct pbw *w, uint64_t v)
{
    uint8_t buf[10];
    size_t k = 0;
    do {
        buf[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return pb_put(w, buf, k);
}

static llm_status pb_uint(struct pbw *w, uint32_t num, uint64_t v)
{
    LLM_TRY(pb_varint(w, (uint64_t)num << 3));
    return pb_varint(w, v);
}

/* int32 fields: negative values are sign-extended to 64 bits */
static llm_status pb_int32(struct pbw *w, uint32_t num, int64_t v)
{
    return pb_uint(w, num, (uint64_t)v);
}

static llm_status pb_len(struct pbw *w, uint32_t num, const void *p, size_t n)
{
    LLM_TRY(pb_varint(w, (uint64_t)num << 3 | 2));
    LLM_TRY(pb_varint(w, n));
    return pb_put(w, p, n);
}

static llm_status pb_float(struct pbw *w, uint32_t num, float f)
{
    uint32_t u = llm_f32_bits(f);
    uint8_t b[4] = { (uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24) };
    LLM_TRY(pb_varint(w, (uint64_t)num << 3 | 5));
    return pb_put(w, b, 4);
}

static llm_status spm_model(struct llm_file *f, const struct llm_vocab_view *v, struct pbw *w)
{
    struct pbw piece = { 0 }, spec = { 0 };
    llm_status s = LLM_OK;
    int bytes = 0;
    for (uint32_t i = 0; i < v->n_tokens && !s; i++) {
        piece.n = 0;
        int32_t t = tok_type(v, i);
        bytes |= t == TT_BYTE;
        s = pb_len(&piece, 1, v->bytes + v->offsets[i], v->offsets[i + 1] - v->offsets[i]);
        if (!s)
            s = pb_float(&piece, 2, v->scores ? v->scores[i] : 0.0f);
        if (!s && t != TT_NORMAL)
            s = pb_uint(&piece, 3, (uint64_t)(t >= 1 && t <= 6 ? t : TT_NORMAL));
        if (!s)
            s = pb_len(w, 1, piece.b, piece.n);
    }
    /* trainer_spec: BPE, the vocabulary size, byte fallback, special ids */
    if (!s)
        s = pb_uint(&spec, 3, 2);
    if (!s)
        s = pb_uint(&spec, 4, v->n_tokens);
    if (!s)
        s = pb_uint(&spec, 35, (uint64_t)bytes);
    static const char *const ids[] = { "tokenizer.unk_id", "tokenizer.bos_id", "tokenizer.eos_id",
                                       "tokenizer.pad_id" };
    for (uint32_t k = 0; k < 4 && !s; k++)
        s = pb_int32(&spec, 40 + k, meta_id(f, ids[k], v->n_tokens));
    if (!s)
        s = pb_len(w, 2, spec.b, spec.n);
    /* normalizer_spec: identity, the dummy prefix, spaces escaped as U+2581 */
    spec.n = 0;
    if (!s)
        s = pb_len(&spec, 1, "identity", 8);
    if (!s)
        s = pb_uint(&spec, 3, (uint64_t)meta_flag(f, "tokenizer.add_space_prefix", 1));
    if (!s)
        s = pb_uint(&spec, 4, 0);
    if (!s)
        s = pb_uint(&spec, 5, 1);
    if (!s)
        s = pb_len(w, 3, spec.b, spec.n);
    llm_free(piece.b);
    llm_free(spec.b);
    return s;
}

/* ------------------------------------------------------------------------ */
/* tokenizer.json (byte-level BPE) */

static json_t *byte_level(int use_regex, int prefix)
{
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", prefix,
                     "trim_offsets", 1, "use_regex", use_regex);
}

static json_t *split(const char *re, size_t n)
{
    return json_pack("{s:s, s:{s:s%}, s:s, s:b}", "type", "Split", "pattern", "Regex", re, n,
                     "behavior", "Isolated", "invert", 0);
}

/* The pre_tokenizer of tokenizer.pre (and tokenizer.pre_regex). */
static llm_status pre_tokenizer(struct llm_file *f, json_t **out)
{
    const char *pre = "default";
    if (llm_meta_get_str(f->meta, "tokenizer.pre", &pre) != LLM_OK)
        pre = "default";
    llm_error_clear();
    int prefix = meta_flag(f, "tokenizer.add_space_prefix", 0);
    json_t *seq = json_array();
    if (!seq)
        return LLM_E_NOMEM;
    *out = json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", seq);
    if (!*out)
        return LLM_E_NOMEM;
    struct llm_meta *rx = llm_meta_get(f->meta, "tokenizer.pre_regex");
    const char *re = NULL;
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3"))
        re = RE_LLAMA3;
    else if (!strcmp(pre, "qwen2"))
        re = RE_QWEN2;
    json_t *last = NULL;
    if (re) {
        if (json_array_append_new(seq, split(re, strlen(re))) != 0)
            return LLM_E_NOMEM;
        last = byte_level(0, prefix);
    } else if (!strcmp(pre, "smollm")) {
        if (json_array_append_new(seq, json_pack("{s:s, s:b}", "type", "Digits",
                                                 "individual_digits", 1)) != 0)
            return LLM_E_NOMEM;
        last = byte_level(1, prefix);
    } else if (!strcmp(pre, "gpt-2") || (!strcmp(pre, "default") && !rx)) {
        last = byte_level(1, prefix);
    } else if (rx && rx->kind == LLM_META_SEQ && rx->n) {
        for (size_t i = 0; i < rx->n; i++) {
            if (rx->items[i]->kind != LLM_META_STR)
                return llm_error_set(LLM_E_FORMAT, "%s: tokenizer.pre_regex[%zu] is not a string",
                                     f->path, i);
            if (json_array_append_new(seq, split(rx->items[i]->s, rx->items[i]->slen)) != 0)
                return llm_error_set(LLM_E_UNSUPPORTED, "%s: tokenizer.pre_regex[%zu] is not UTF-8",
                                     f->path, i);
        }
        last = byte_level(0, prefix);
    } else {
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: pre-tokenizer '%s' has no tokenizer.json form here "
                             "(gpt-2, smollm, llama-bpe, qwen2, or a tokenizer.pre_regex)",
                             f->path, pre);
    }
    if (json_array_append_new(seq, last) != 0)
        return LLM_E_NOMEM;
    return LLM_OK;
}

/* Adds BOS (and EOS) as the TemplateProcessing of tokenizers does. */
static llm_status post_processor(struct llm_file *f, const struct llm_vocab_view *v, json_t **out)
{
    int64_t bos = meta_id(f, "tokenizer.bos_id", v->n_tokens);
    int64_t eos = meta_id(f, "tokenizer.eos_id", v->n_tokens);
    int add_bos = meta_flag(f, "tokenizer.add_bos", 0) && bos >= 0;
    int add_eos = meta_flag(f, "tokenizer.add_eos", 0) && eos >= 0;
    if (!add_bos && !add_eos) {
        *out = byte_level(0, 0);
        return *out ? LLM_OK : LLM_E_NOMEM;
    }
    json_t *single = json_array(), *pair = json_array(), *sp = json_object();
    *out = json_pack("{s:s, s:o, s:o, s:o}", "type", "TemplateProcessing", "single", single,
                     "pair", pair, "special_tokens", sp);
    if (!*out)
        return LLM_E_NOMEM;
    const int64_t ids[2] = { add_bos ? bos : -1, add_eos ? eos : -1 };
    for (int seq = 0; seq < 2; seq++) {
        json_t *arr = seq ? pair : single;
        for (int part = 0; part < (seq ? 2 : 1); part++) {
            const char *ab = part ? "B" : "A";
            for (int k = 0; k < 3; k++) {
                json_t *item;
                if (k == 1)
                    item = json_pack("{s:{s:s, s:i}}", "Sequence", "id", ab, "type_id", part);
                else if (ids[k / 2] < 0)
                    continue;
                else {
                    json_t *txt;
                    LLM_TRY(jtoken(v, (uint32_t)ids[k / 2], &txt));
                    item = json_pack("{s:{s:O, s:i}}", "SpecialToken", "id", txt, "type_id", part);
                    json_t *ent = json_pack("{s:O, s:[I], s:[O]}", "id", txt, "ids",
                                            (json_int_t)ids[k / 2], "tokens", txt);
                    llm_status s = ent ? jset(sp, json_string_value(txt), ent) : LLM_E_NOMEM;
                    json_decref(txt);
                    LLM_TRY(s);
                }
                if (!item || json_array_append_new(arr, item) != 0)
                    return LLM_E_NOMEM;
            }
        }
    }
    return LLM_OK;
}

static llm_status bpe_json(struct llm_file *f, const struct llm_vocab_view *v, json_t *root)
{
    /* the components in the order tokenizers writes them; the model is
     * filled once it hangs in root, so that no error path leaks it */
    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    json_t *model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE",
                              "dropout", "unk_token", "continuing_subword_prefix",
                              "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                              "ignore_merges", 0, "vocab", vocab, "merges", merges);
    if (!model) {
        json_decref(added);
        return llm_error_set(LLM_E_NOMEM, "out of memory (tokenizer files)");
    }
    llm_status s = jset(root, "model", model);
    if (s) {
        json_decref(added);
        return s;
    }
    LLM_TRY(jset(root, "version", json_string("1.0")));
    LLM_TRY(jset(root, "truncation", json_null()));
    LLM_TRY(jset(root, "padding", json_null()));
    LLM_TRY(jset(root, "added_tokens", added));
    LLM_TRY(jset(root, "normalizer", json_null()));
    json_t *pre = NULL, *post = NULL;
    s = pre_tokenizer(f, &pre);
    if (!s)
        s = jset(root, "pre_tokenizer", pre);
    else
        json_decref(pre);
    LLM_TRY(s);
    s = post_processor(f, v, &post);
    if (!s)
        s = jset(root, "post_processor", post);
    else
        json_decref(post);
    LLM_TRY(s);
    LLM_TRY(jset(root, "decoder", byte_level(1, 1)));
    /* moved to the end, where tokenizers puts it */
    json_incref(model);
    json_object_del(root, "model");
    LLM_TRY(jset(root, "model", model));
    const char *pname = "";
    if (llm_meta_get_str(f->meta, "tokenizer.pre", &pname) != LLM_OK)
        pname = "";
    llm_error_clear();
    if (!strcmp(pname, "llama-bpe") || !strcmp(pname, "llama3") || !strcmp(pname, "llama-v3"))
        LLM_TRY(jset(model, "ignore_merges", json_true()));
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        json_t *t;
        LLM_TRY(jtoken(v, i, &t));
        /* tokenizers keeps added tokens in the model's vocabulary too */
        s = json_object_set_new(vocab, json_string_value(t), json_integer(i)) ? LLM_E_NOMEM
                                                                               : LLM_OK;
        int32_t type = tok_type(v, i);
        if (!s && (type == TT_CONTROL || type == TT_USER)) {
            json_t *a = json_pack("{s:I, s:O, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i,
                                  "content", t, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                  "normalized", type == TT_USER, "special", type == TT_CONTROL);
            if (!a || json_array_append_new(added, a) != 0)
                s = LLM_E_NOMEM;
        }
        json_decref(t);
        LLM_TRY(s);
    }
    for (uint32_t i = 0; i < v->n_merges; i++) {
        json_t *m = json_stringn((const char *)v->merge_bytes + v->merge_offsets[i],
                                 v->merge_offsets[i + 1] - v->merge_offsets[i]);
        if (!m)
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: merge %u is not valid UTF-8", f->path, i);
        if (json_array_append_new(merges, m) != 0)
            return LLM_E_NOMEM;
    }
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */

static llm_status tokenizer_config(struct llm_file *f, const struct llm_vocab_view *v, int spm,
                                   json_t *tc)
{
    static const char *const specials[][2] = { { "tokenizer.bos_id", "bos_token" },
                                               { "tokenizer.eos_id", "eos_token" },
                                               { "tokenizer.unk_id", "unk_token" },
                                               { "tokenizer.pad_id", "pad_token" } };
    for (size_t i = 0; i < 4; i++) {
        int64_t id = meta_id(f, specials[i][0], v->n_tokens);
        json_t *t = NULL;
        if (id >= 0)
            LLM_TRY(jtoken(v, (uint32_t)id, &t));
        LLM_TRY(jset(tc, specials[i][1], t ? t : json_null()));
    }
    LLM_TRY(jset(tc, "add_bos_token", json_boolean(meta_flag(f, "tokenizer.add_bos", spm))));
    LLM_TRY(jset(tc, "add_eos_token", json_boolean(meta_flag(f, "tokenizer.add_eos", 0))));
    LLM_TRY(jset(tc, "clean_up_tokenization_spaces", json_false()));
    int64_t ctx;
    if (llm_meta_get_i64(f->meta, "hparams.context_length", &ctx) == LLM_OK)
        LLM_TRY(jset(tc, "model_max_length", json_integer(ctx)));
    llm_error_clear();
    LLM_TRY(jset(tc, "tokenizer_class",
                 json_string(spm ? "LlamaTokenizer" : "PreTrainedTokenizerFast")));
    if (spm)
        LLM_TRY(jset(tc, "legacy", json_true()));
    const char *tmpl;
    if (llm_meta_get_str(f->meta, "chat_template", &tmpl) == LLM_OK) {
        json_t *t = json_string(tmpl);
        if (!t)
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: chat_template is not valid UTF-8",
                                 f->path);
        LLM_TRY(jset(tc, "chat_template", t));
    }
    llm_error_clear();
    return LLM_OK;
}

llm_status llm_hf_tokenizer_write(struct llm_file *f, const char *dir, int *written)
{
    *written = 0;
    const char *model = "none";
    if (llm_meta_get_str(f->meta, "tokenizer.model", &model) != LLM_OK)
        model = "none";
    llm_error_clear();
    struct llm_vocab_view v;
    llm_status s = llm_file_vocab(f, &v);
    if (s == LLM_E_NOTFOUND || !strcmp(model, "none")) {
        llm_error_clear();
        return LLM_OK;
    }
    LLM_TRY(s);
    int spm = strcmp(model, "llama") == 0;
    if (!spm && strcmp(model, "gpt2") != 0)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: tokenizer model '%s' cannot be written as Hugging Face files",
                             f->path, model);
    json_t *tc = json_object(), *tj = spm ? NULL : json_object();
    struct pbw w = { 0 };
    s = tc && (spm || tj) ? LLM_OK : LLM_E_NOMEM;
    if (!s)
        s = tokenizer_config(f, &v, spm, tc);
    if (!s)
        s = spm ? spm_model(f, &v, &w) : bpe_json(f, &v, tj);
    if (!s)
        s = spm ? write_bytes(dir, "tokenizer.model", w.b, w.n)
                : write_json(dir, "tokenizer.json", tj);
    if (!s)
        s = write_json(dir, "tokenizer_config.json", tc);
    if (!s)
        *written = 1;
    llm_free(w.b);
    json_decref(tc);
    json_decref(tj);
    return s;
}
