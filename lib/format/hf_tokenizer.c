/* hf_tokenizer.c: the tokenizer of a Hugging Face model directory
 * (formats.md §3.6-3.9, §2.1): tokenizer.json (BPE), tokenizer.model
 * (SentencePiece), tokenizer_config.json and chat_template.jinja, mapped to
 * the GGUF-style vocabulary and tokenizer.* metadata of file.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "file.h"
#include "hf.h"
#include "import.h"

/* GGUF token types (formats.md §2.3). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* The score llama.cpp's converter gives to added and padding tokens. */
#define ADDED_SCORE (-1000.0f)

#define MAX_TOKENIZER_JSON ((size_t)1 << 30)
#define MAX_SMALL_JSON ((size_t)64 << 20)

/* Regexes of the pre-tokenizers that have a llama.cpp name (formats.md
 * §2.4), as the regex engine sees them. */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------------------ */
/* a vocabulary under construction */

struct vb {
    uint32_t n;
    char **tok;      /* (n) owned texts, NULL for a hole */
    uint32_t *len;   /* (n) */
    float *score;    /* (n) */
    int32_t *type;   /* (n) */
};

static void vb_free(struct vb *v)
{
    if (v->tok)
        for (uint32_t i = 0; i < v->n; i++)
            llm_free(v->tok[i]);
    llm_free(v->tok);
    llm_free(v->len);
    llm_free(v->score);
    llm_free(v->type);
    memset(v, 0, sizeof *v);
}

static llm_status vb_init(struct vb *v, uint32_t n)
{
    memset(v, 0, sizeof *v);
    v->tok = llm_calloc(n, sizeof *v->tok);
    v->len = llm_calloc(n, sizeof *v->len);
    v->score = llm_calloc(n, sizeof *v->score);
    v->type = llm_calloc(n, sizeof *v->type);
    v->n = n;
    if (!v->tok || !v->len || !v->score || !v->type) {
        vb_free(v);
        return LLM_E_NOMEM;
    }
    return LLM_OK;
}

static llm_status vb_set(struct vb *v, uint32_t id, const char *s, size_t n, int32_t type,
                         float score)
{
    if (n > UINT32_MAX)
        return llm_error_set(LLM_E_FORMAT, "token %u is too long", id);
    char *c = llm_strndup(s, n);
    if (!c)
        return LLM_E_NOMEM;
    llm_free(v->tok[id]);
    v->tok[id] = c;
    v->len[id] = (uint32_t)n;
    v->type[id] = type;
    v->score[id] = score;
    return LLM_OK;
}

/* Holes (ids nobody named) become "[PAD<id>]", as llama.cpp's converter
 * writes them. */
static llm_status vb_fill_holes(struct vb *v)
{
    for (uint32_t i = 0; i < v->n; i++)
        if (!v->tok[i]) {
            char buf[32];
            int k = snprintf(buf, sizeof buf, "[PAD%u]", i);
            LLM_TRY(vb_set(v, i, buf, (size_t)k, TT_UNUSED, ADDED_SCORE));
        }
    return LLM_OK;
}

static llm_status vb_commit(struct llm_file *f, const struct vb *v, int with_scores)
{
    return llm_file_set_vocab(f, v->n, (const char *const *)v->tok, v->len,
                              with_scores ? v->score : NULL, v->type);
}

/* Copy f's vocabulary into a builder of at least n_min tokens. */
static llm_status vb_from_file(struct llm_file *f, struct vb *v, uint32_t n_min)
{
    struct llm_vocab_view w;
    LLM_TRY(llm_file_vocab(f, &w));
    LLM_TRY(vb_init(v, w.n_tokens > n_min ? w.n_tokens : n_min));
    for (uint32_t i = 0; i < w.n_tokens; i++) {
        llm_status s = vb_set(v, i, (const char *)w.bytes + w.offsets[i],
                              w.offsets[i + 1] - w.offsets[i], w.types ? w.types[i] : TT_NORMAL,
                              w.scores ? w.scores[i] : 0.0f);
        if (s) {
            vb_free(v);
            return s;
        }
    }
    return LLM_OK;
}

/* The id of the token with this text, preferring special tokens; -1. */
static int64_t find_token(struct llm_file *f, const char *s, size_t n)
{
    struct llm_vocab_view w;
    if (llm_file_vocab(f, &w) != LLM_OK)
        return -1;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < w.n_tokens; i++) {
            if (pass == 0 && w.types && (w.types[i] == TT_NORMAL || w.types[i] == TT_BYTE))
                continue;
            if (w.offsets[i + 1] - w.offsets[i] == n && memcmp(w.bytes + w.offsets[i], s, n) == 0)
                return i;
        }
    return -1;
}

/* The converter's test for added tokens that are control tokens although
 * not marked special. */
static int looks_special(const char *s, size_t n)
{
    static const char *const known[] = { "<pad>", "<mask>", "<2mass>", "[@BOS@]" };
    if (n >= 4 && memcmp(s, "<|", 2) == 0 && memcmp(s + n - 2, "|>", 2) == 0)
        return 1;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strlen(known[i]) == n && memcmp(s, known[i], n) == 0)
            return 1;
    return 0;
}

static int is_upper_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
}

/* "<0xXX>": a SentencePiece byte-fallback piece. */
static int is_byte_token(const char *s, size_t n)
{
    return n == 6 && memcmp(s, "<0x", 3) == 0 && is_upper_hex(s[3]) && is_upper_hex(s[4]) &&
           s[5] == '>';
}

/* ------------------------------------------------------------------------ */
/* JSON helpers */

static int jbool(const json_t *o, const char *k, int def)
{
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static const char *jstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static const char *ctype(const json_t *c)
{
    const char *t = jstr(c, "type");
    return t ? t : "";
}

#define MAX_COMPONENTS 32

struct comps {
    json_t *c[MAX_COMPONENTS];
    size_t n;
};

/* Flatten nested {"type": "Sequence", seqkey: [...]} components. */
static void flatten(json_t *c, const char *seqkey, struct comps *out, int depth)
{
    if (!json_is_object(c) || depth > 8)
        return;
    if (strcmp(ctype(c), "Sequence") == 0) {
        json_t *arr = json_object_get(c, seqkey), *v;
        size_t i;
        json_array_foreach(arr, i, v)
            flatten(v, seqkey, out, depth + 1);
        return;
    }
    if (out->n < MAX_COMPONENTS)
        out->c[out->n++] = c;
}

static json_t *find_comp(const struct comps *cs, const char *type)
{
    for (size_t i = 0; i < cs->n; i++)
        if (strcmp(ctype(cs->c[i]), type) == 0)
            return cs->c[i];
    return NULL;
}

/* The tokenizer.json components that decide the tokenizer family. */
struct tj_style {
    struct comps pre, dec, norm, post;
    int byte_level; /* gpt2 */
    int spm;        /* SentencePiece-style BPE: byte fallback or Metaspace */
};

static void tj_style(json_t *root, struct tj_style *st)
{
    memset(st, 0, sizeof *st);
    flatten(json_object_get(root, "pre_tokenizer"), "pretokenizers", &st->pre, 0);
    flatten(json_object_get(root, "decoder"), "decoders", &st->dec, 0);
    flatten(json_object_get(root, "normalizer"), "normalizers", &st->norm, 0);
    flatten(json_object_get(root, "post_processor"), "processors", &st->post, 0);
    st->byte_level = find_comp(&st->pre, "ByteLevel") || find_comp(&st->dec, "ByteLevel");
    json_t *model = json_object_get(root, "model");
    st->spm = !st->byte_level &&
              (jbool(model, "byte_fallback", 0) || find_comp(&st->pre, "Metaspace") ||
               find_comp(&st->dec, "Metaspace") || find_comp(&st->dec, "ByteFallback"));
}

static llm_status push_str(struct llm_meta *seq, const char *s, size_t n)
{
    return llm_meta_push(seq, llm_meta_new_strn(s, n));
}

/* A literal Split pattern as a regex. */
static llm_status push_escaped(struct llm_meta *seq, const char *s)
{
    size_t n = strlen(s);
    char *e = llm_malloc(2 * n + 1);
    if (!e)
        return LLM_E_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strchr("\\.^$|?*+()[]{}/-", s[i]))
            e[k++] = '\\';
        e[k++] = s[i];
    }
    llm_status st = push_str(seq, e, k);
    llm_free(e);
    return st;
}

/* tokenizer.pre (a llama.cpp name) and tokenizer.pre_regex. */
static llm_status set_pre(struct llm_file *f, const struct tj_style *st)
{
    struct llm_meta *seq = llm_meta_new(LLM_META_SEQ);
    if (!seq)
        return LLM_E_NOMEM;
    llm_status s = LLM_OK;
    const struct comps *p = &st->pre;
    for (size_t i = 0; i < p->n && !s; i++) {
        const char *t = ctype(p->c[i]);
        if (strcmp(t, "Split") == 0) {
            json_t *pat = json_object_get(p->c[i], "pattern");
            const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
            if (re)
                s = push_str(seq, re, json_string_length(json_object_get(pat, "Regex")));
            else if (lit)
                s = push_escaped(seq, lit);
        } else if (strcmp(t, "Digits") == 0) {
            s = push_str(seq, jbool(p->c[i], "individual_digits", 0) ? "\\p{N}" : "\\p{N}+",
                         jbool(p->c[i], "individual_digits", 0) ? 5 : 6);
        } else if (strcmp(t, "ByteLevel") == 0 && jbool(p->c[i], "use_regex", 1)) {
            s = push_str(seq, RE_GPT2, strlen(RE_GPT2));
        }
    }
    if (s) {
        llm_meta_free(seq);
        return s;
    }
    const char *name = "default";
    if (!st->spm && p->n == 1 && strcmp(ctype(p->c[0]), "ByteLevel") == 0 &&
        jbool(p->c[0], "use_regex", 1)) {
        name = "gpt-2";
    } else if (!st->spm && p->n == 2 && strcmp(ctype(p->c[1]), "ByteLevel") == 0) {
        int use_re = jbool(p->c[1], "use_regex", 1);
        const char *re = jstr(json_object_get(p->c[0], "pattern"), "Regex");
        if (strcmp(ctype(p->c[0]), "Digits") == 0 && jbool(p->c[0], "individual_digits", 0) &&
            use_re)
            name = "smollm";
        else if (strcmp(ctype(p->c[0]), "Split") == 0 && re && !use_re &&
                 strcmp(re, RE_LLAMA3) == 0)
            name = "llama-bpe";
        else if (strcmp(ctype(p->c[0]), "Split") == 0 && re && !use_re &&
                 strcmp(re, RE_QWEN2) == 0)
            name = "qwen2";
    }
    LLM_TRY(llm_meta_set_str(f->meta, "tokenizer.pre", name));
    if (seq->n == 0) {
        llm_meta_free(seq);
        llm_meta_del(f->meta, "tokenizer.pre_regex");
        return LLM_OK;
    }
    return llm_meta_set(f->meta, "tokenizer.pre_regex", seq);
}

/* "a b" strings are kept; [a, b] pairs are joined with a space after each
 * space inside a part becomes U+0120, as llama.cpp's converter does. */
static llm_status merge_text(json_t *m, const char *name, size_t idx, char **out, uint32_t *len)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp)
            return llm_error_set(LLM_E_FORMAT, "%s: merge %zu ('%s') is not \"a b\"", name, idx, s);
        if (n > UINT32_MAX)
            return llm_error_set(LLM_E_FORMAT, "%s: merge %zu is too long", name, idx);
        *out = llm_strndup(s, n);
        *len = (uint32_t)n;
        return *out ? LLM_OK : LLM_E_NOMEM;
    }
    if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(json_array_get(m, 0)) ||
        !json_is_string(json_array_get(m, 1)))
        return llm_error_set(LLM_E_FORMAT, "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]",
                             name, idx);
    size_t total = 1;
    for (int k = 0; k < 2; k++) {
        json_t *p = json_array_get(m, k);
        const char *s = json_string_value(p);
        for (size_t i = 0; i < json_string_length(p); i++)
            total += s[i] == ' ' ? 2 : 1;
    }
    if (total > UINT32_MAX)
        return llm_error_set(LLM_E_FORMAT, "%s: merge %zu is too long", name, idx);
    char *buf = llm_malloc(total + 1);
    if (!buf)
        return LLM_E_NOMEM;
    size_t k = 0;
    for (int part = 0; part < 2; part++) {
        json_t *p = json_array_get(m, part);
        const char *s = json_string_value(p);
        if (part)
            buf[k++] = ' ';
        for (size_t i = 0; i < json_string_length(p); i++) {
            if (s[i] == ' ') {
                buf[k++] = (char)0xC4; /* U+0120 */
                buf[k++] = (char)0xA0;
            } else {
                buf[k++] = s[i];
            }
        }
    }
    buf[k] = 0;
    *out = buf;
    *len = (uint32_t)k;
    return LLM_OK;
}

static llm_status read_merges(struct llm_file *f, json_t *merges, const char *name)
{
    if (!merges || json_is_null(merges))
        return llm_file_set_merges(f, 0, NULL, NULL);
    if (!json_is_array(merges))
        return llm_error_set(LLM_E_FORMAT, "%s: model.merges is not an array", name);
    size_t n = json_array_size(merges);
    if (n > UINT32_MAX - 1)
        return llm_error_set(LLM_E_FORMAT, "%s: too many merges", name);
    char **txt = llm_calloc(n ? n : 1, sizeof *txt);
    uint32_t *len = llm_calloc(n ? n : 1, sizeof *len);
    llm_status s = txt && len ? LLM_OK : LLM_E_NOMEM;
    uint32_t k = 0;
    for (size_t i = 0; i < n && !s; i++) {
        json_t *m = json_array_get(merges, i);
        if (json_is_string(m) && strncmp(json_string_value(m), "#version", 8) == 0)
            continue;
        s = merge_text(m, name, i, &txt[k], &len[k]);
        if (!s)
            k++;
    }
    if (!s)
        s = llm_file_set_merges(f, k, (const char *const *)txt, len);
    for (uint32_t i = 0; txt && i < k; i++)
        llm_free(txt[i]);
    llm_free(txt);
    llm_free(len);
    return s;
}

static int64_t json_id(const json_t *v)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t i = json_integer_value(v);
    return i < 0 || i > (json_int_t)UINT32_MAX ? -1 : (int64_t)i;
}

/* The vocabulary of model.vocab and added_tokens. */
static llm_status read_vocab(struct llm_file *f, json_t *root, const char *name, uint32_t min_tokens,
                             const struct tj_style *st)
{
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab))
        return llm_error_set(LLM_E_FORMAT, "%s: model.vocab is missing or not an object", name);
    if (added && !json_is_null(added) && !json_is_array(added))
        return llm_error_set(LLM_E_FORMAT, "%s: added_tokens is not an array", name);
    /* Ids past every named token and past config.json's vocab_size would
     * only make holes: refuse them before allocating. */
    uint64_t cap = json_object_size(vocab) + json_array_size(added);
    if (cap < min_tokens)
        cap = min_tokens;
    uint64_t n = min_tokens;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        int64_t id = json_id(v);
        if (id < 0 || (uint64_t)id >= cap)
            return llm_error_set(LLM_E_FORMAT, "%s: token '%s' has a bad id", name, key);
        if ((uint64_t)id + 1 > n)
            n = (uint64_t)id + 1;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        int64_t id = json_id(json_object_get(v, "id"));
        if (!json_is_string(json_object_get(v, "content")))
            return llm_error_set(LLM_E_FORMAT, "%s: added token %zu has no content", name, i);
        if (id < 0 || (uint64_t)id >= cap)
            return llm_error_set(LLM_E_FORMAT, "%s: added token %zu has a bad id", name, i);
        if ((uint64_t)id + 1 > n)
            n = (uint64_t)id + 1;
    }
    if (n == 0)
        return llm_error_set(LLM_E_FORMAT, "%s: empty vocabulary", name);
    if (n > UINT32_MAX - 1)
        return llm_error_set(LLM_E_FORMAT, "%s: vocabulary too large", name);

    struct vb b;
    LLM_TRY(vb_init(&b, (uint32_t)n));
    llm_status s = LLM_OK;
    json_object_foreach(vocab, key, v) {
        uint32_t id = (uint32_t)json_id(v);
        if (b.tok[id]) {
            s = llm_error_set(LLM_E_FORMAT, "%s: tokens '%s' and '%s' have the same id %u", name,
                              b.tok[id], key, id);
            break;
        }
        size_t kl = strlen(key);
        int32_t type = st->spm && is_byte_token(key, kl) ? TT_BYTE : TT_NORMAL;
        /* SentencePiece BPE ids follow merge order, so -id ranks like the
         * scores of a tokenizer.model (formats.md §3.9). */
        s = vb_set(&b, id, key, kl, type, type == TT_NORMAL ? -(float)id : 0.0f);
        if (s)
            break;
    }
    json_array_foreach(added, i, v) {
        if (s)
            break;
        json_t *c = json_object_get(v, "content");
        const char *txt = json_string_value(c);
        size_t tl = json_string_length(c);
        int special = jbool(v, "special", 0) || looks_special(txt, tl);
        s = vb_set(&b, (uint32_t)json_id(json_object_get(v, "id")), txt, tl,
                   special ? TT_CONTROL : TT_USER, ADDED_SCORE);
    }
    const char *unk = jstr(model, "unk_token");
    if (!s && st->spm && unk)
        for (uint32_t k = 0; k < b.n; k++)
            if (b.tok[k] && strcmp(b.tok[k], unk) == 0 && b.len[k] == strlen(unk))
                b.type[k] = TT_UNKNOWN;
    if (!s)
        s = vb_fill_holes(&b);
    if (!s)
        s = vb_commit(f, &b, st->spm);
    vb_free(&b);
    return s;
}

/* BOS/EOS from a TemplateProcessing post-processor ("<s> $A" adds BOS). */
static llm_status read_post(struct llm_file *f, const struct tj_style *st)
{
    json_t *tp = find_comp(&st->post, "TemplateProcessing");
    json_t *single = json_object_get(tp, "single");
    size_t n = json_array_size(single);
    if (!n)
        return LLM_OK;
    json_t *specials = json_object_get(tp, "special_tokens");
    const char *keys[2] = { "tokenizer.bos_id", "tokenizer.eos_id" };
    const char *adds[2] = { "tokenizer.add_bos", "tokenizer.add_eos" };
    for (int end = 0; end < 2; end++) {
        json_t *item = json_object_get(json_array_get(single, end ? n - 1 : 0), "SpecialToken");
        int add = item != NULL && (!end || n > 1);
        LLM_TRY(llm_meta_set_bool(f->meta, adds[end], add));
        if (!add)
            continue;
        const char *tid = jstr(item, "id");
        json_t *ids = json_object_get(json_object_get(specials, tid ? tid : ""), "ids");
        int64_t id = json_id(json_array_get(ids, 0));
        if (id < 0 && tid)
            id = find_token(f, tid, strlen(tid));
        if (id >= 0)
            LLM_TRY(llm_meta_set_i64(f->meta, keys[end], id));
    }
    return LLM_OK;
}

static llm_status tokenizer_json_root(struct llm_file *f, json_t *root, const char *name,
                                      uint32_t min_tokens)
{
    if (!json_is_object(root))
        return llm_error_set(LLM_E_FORMAT, "%s: not a JSON object", name);
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return llm_error_set(LLM_E_FORMAT, "%s: missing key 'model'", name);
    const char *type = jstr(model, "type");
    if (type && strcmp(type, "BPE") != 0)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: tokenizer model type '%s' is not supported (BPE only)", name,
                             type);
    struct tj_style st;
    tj_style(root, &st);
    LLM_TRY(read_vocab(f, root, name, min_tokens, &st));
    LLM_TRY(read_merges(f, json_object_get(model, "merges"), name));
    struct llm_meta *m = f->meta;
    LLM_TRY(llm_meta_set_str(m, "tokenizer.model", st.spm ? "llama" : "gpt2"));
    LLM_TRY(set_pre(f, &st));
    LLM_TRY(read_post(f, &st));
    const char *unk = jstr(model, "unk_token");
    if (unk) {
        int64_t id = find_token(f, unk, strlen(unk));
        if (id >= 0)
            LLM_TRY(llm_meta_set_i64(m, "tokenizer.unk_id", id));
    }
    /* Whether a space is put before the text. */
    json_t *ms = find_comp(&st.pre, "Metaspace"), *bl = find_comp(&st.pre, "ByteLevel");
    json_t *prep = find_comp(&st.norm, "Prepend");
    if (ms) {
        const char *scheme = jstr(ms, "prepend_scheme");
        int add = scheme ? strcmp(scheme, "never") != 0 : jbool(ms, "add_prefix_space", 1);
        LLM_TRY(llm_meta_set_bool(m, "tokenizer.add_space_prefix", add));
    } else if (prep) {
        LLM_TRY(llm_meta_set_bool(m, "tokenizer.add_space_prefix", 1));
    } else if (bl) {
        LLM_TRY(llm_meta_set_bool(m, "tokenizer.add_space_prefix",
                                  jbool(bl, "add_prefix_space", 0)));
    } else if (st.spm) {
        LLM_TRY(llm_meta_set_bool(m, "tokenizer.add_space_prefix", 0));
    }
    return LLM_OK;
}

llm_status llm_hf_tokenizer_json(struct llm_file *f, const char *text, size_t len,
                                 const char *name, uint32_t min_tokens)
{
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return llm_error_set(LLM_E_FORMAT, "%s: JSON: %s (line %d, column %d)", name, err.text,
                             err.line, err.column);
    llm_status s = tokenizer_json_root(f, root, name, min_tokens);
    json_decref(root);
    return s;
}

/* ------------------------------------------------------------------------ */
/* tokenizer.model and the extra tokens of tokenizer_config.json */

static llm_status add_extra_token(struct vb *b, int64_t id, const char *txt, size_t n, int special)
{
    if (id < 0 || (uint64_t)id >= b->n)
        return LLM_OK; /* the converter skips ids outside the vocabulary too */
    special |= looks_special(txt, n);
    if (special)
        return vb_set(b, (uint32_t)id, txt, n, TT_CONTROL, ADDED_SCORE);
    /* A user-defined token is matched in raw text, where spaces are spaces. */
    LLM_TRY(vb_set(b, (uint32_t)id, txt, n, TT_USER, ADDED_SCORE));
    char *t = b->tok[id];
    size_t k = 0;
    for (size_t i = 0; i < b->len[id]; i++) {
        if (i + 2 < b->len[id] && (unsigned char)t[i] == 0xE2 && (unsigned char)t[i + 1] == 0x96 &&
            (unsigned char)t[i + 2] == 0x81) {
            t[k++] = ' ';
            i += 2;
        } else {
            t[k++] = t[i];
        }
    }
    t[k] = 0;
    b->len[id] = (uint32_t)k;
    return LLM_OK;
}

static llm_status spm_dir(struct llm_file *f, const char *dir, const char *path,
                          uint32_t vocab_size, json_t *tcfg)
{
    struct llm_map mp;
    LLM_TRY(llm_small_map(&mp, path, LLM_TOKENIZER_MAX));
    llm_status s = llm_spm_parse(f, mp.data, mp.size, path);
    llm_map_close(&mp);
    if (s)
        return s;
    struct vb b;
    LLM_TRY(vb_from_file(f, &b, vocab_size));
    json_t *extra = NULL;
    s = llm_hf_json_load(&extra, dir, "added_tokens.json", MAX_SMALL_JSON, LLM_HF_JSON_OPTIONAL);
    if (s == LLM_E_NOTFOUND)
        s = LLM_OK;
    const char *key;
    json_t *v;
    if (!s && json_is_object(extra))
        json_object_foreach(extra, key, v) {
            s = add_extra_token(&b, json_id(v), key, strlen(key), 0);
            if (s)
                break;
        }
    json_decref(extra);
    json_t *dec = json_object_get(tcfg, "added_tokens_decoder");
    if (!s && json_is_object(dec))
        json_object_foreach(dec, key, v) {
            json_t *c = json_object_get(v, "content");
            char *end;
            unsigned long long id = strtoull(key, &end, 10);
            if (!json_is_string(c) || *end || end == key || id > UINT32_MAX)
                continue;
            s = add_extra_token(&b, (int64_t)id, json_string_value(c), json_string_length(c),
                                jbool(v, "special", 0));
            if (s)
                break;
        }
    if (!s)
        s = vb_fill_holes(&b);
    if (!s)
        s = vb_commit(f, &b, 1);
    vb_free(&b);
    return s;
}

/* ------------------------------------------------------------------------ */
/* tokenizer_config.json */

static llm_status set_special(struct llm_file *f, const char *key, json_t *v, const char *name)
{
    if (!v || json_is_null(v))
        return LLM_OK;
    json_t *c = json_is_object(v) ? json_object_get(v, "content") : v;
    if (!json_is_string(c))
        return llm_error_set(LLM_E_FORMAT, "%s: '%s' is neither a string nor {\"content\": ...}",
                             name, key);
    int64_t id = find_token(f, json_string_value(c), json_string_length(c));
    if (id < 0)
        return LLM_OK; /* the converter, too, ignores a token it cannot find */
    char path[64];
    snprintf(path, sizeof path, "tokenizer.%.*s_id", (int)(strlen(key) - 6), key);
    return llm_meta_set_i64(f->meta, path, id);
}

static llm_status set_templates(struct llm_file *f, json_t *ct, const char *name)
{
    if (!ct || json_is_null(ct))
        return LLM_OK;
    if (json_is_string(ct))
        return llm_meta_set_strn(f->meta, "chat_template", json_string_value(ct),
                                 json_string_length(ct));
    if (!json_is_array(ct))
        return llm_error_set(LLM_E_FORMAT, "%s: chat_template is neither a string nor a list",
                             name);
    size_t i;
    json_t *v;
    json_array_foreach(ct, i, v) {
        json_t *tn = json_object_get(v, "name"), *tt = json_object_get(v, "template");
        if (!json_is_string(tn) || !json_is_string(tt))
            return llm_error_set(LLM_E_FORMAT,
                                 "%s: chat_template entry %zu is not {\"name\", \"template\"}",
                                 name, i);
        struct llm_meta *node = llm_meta_new_strn(json_string_value(tt), json_string_length(tt));
        if (strcmp(json_string_value(tn), "default") == 0) {
            LLM_TRY(llm_meta_set(f->meta, "chat_template", node));
            continue;
        }
        struct llm_meta *map = llm_meta_get(f->meta, "chat_templates");
        if (!map || map->kind != LLM_META_MAP) {
            map = llm_meta_new(LLM_META_MAP);
            if (!map) {
                llm_meta_free(node);
                return LLM_E_NOMEM;
            }
            llm_status s = llm_meta_set(f->meta, "chat_templates", map);
            if (s) {
                llm_meta_free(node);
                return s;
            }
        }
        LLM_TRY(llm_meta_put(map, json_string_value(tn), node));
    }
    return LLM_OK;
}

static llm_status apply_tokenizer_config(struct llm_file *f, json_t *tc, const char *name)
{
    if (!json_is_object(tc))
        return llm_error_set(LLM_E_FORMAT, "%s: not a JSON object", name);
    static const char *const specials[] = { "bos_token", "eos_token", "unk_token", "pad_token",
                                            "sep_token" };
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        LLM_TRY(set_special(f, specials[i], json_object_get(tc, specials[i]), name));
    static const char *const bools[][2] = { { "add_bos_token", "tokenizer.add_bos" },
                                            { "add_eos_token", "tokenizer.add_eos" },
                                            { "add_prefix_space", "tokenizer.add_space_prefix" } };
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        json_t *v = json_object_get(tc, bools[i][0]);
        if (json_is_boolean(v))
            LLM_TRY(llm_meta_set_bool(f->meta, bools[i][1], json_is_true(v)));
    }
    return set_templates(f, json_object_get(tc, "chat_template"), name);
}

/* ------------------------------------------------------------------------ */

llm_status llm_hf_tokenizer_dir(struct llm_file *f, const char *dir, uint32_t vocab_size,
                                const struct llm_hf_ids *cfg_ids)
{
    char tj_path[4096], tm_path[4096], tc_path[4096], jinja[4096];
    LLM_TRY(llm_hf_path(tj_path, sizeof tj_path, dir, "tokenizer.json"));
    LLM_TRY(llm_hf_path(tm_path, sizeof tm_path, dir, "tokenizer.model"));
    LLM_TRY(llm_hf_path(tc_path, sizeof tc_path, dir, "tokenizer_config.json"));
    LLM_TRY(llm_hf_path(jinja, sizeof jinja, dir, "chat_template.jinja"));
    json_t *tj = NULL, *tc = NULL;
    llm_status s = llm_hf_json_load(&tj, dir, "tokenizer.json", MAX_TOKENIZER_JSON,
                                    LLM_HF_JSON_OPTIONAL);
    if (s && s != LLM_E_NOTFOUND)
        return s;
    s = llm_hf_json_load(&tc, dir, "tokenizer_config.json", MAX_SMALL_JSON,
                         LLM_HF_JSON_OPTIONAL | LLM_HF_JSON_INT_AS_REAL);
    if (s && s != LLM_E_NOTFOUND) {
        json_decref(tj);
        return s;
    }
    s = LLM_OK;
    int have_model = access(tm_path, F_OK) == 0;
    struct tj_style st;
    memset(&st, 0, sizeof st);
    if (tj)
        tj_style(tj, &st);
    /* SentencePiece-style tokenizer.json files are exports of
     * tokenizer.model, which alone has the real piece scores; llama.cpp's
     * converter prefers it as well. */
    if (tj && json_is_object(tj) && !(st.spm && have_model))
        s = tokenizer_json_root(f, tj, tj_path, vocab_size);
    else if (have_model)
        s = spm_dir(f, dir, tm_path, vocab_size, tc);
    else if (tj)
        s = llm_error_set(LLM_E_FORMAT, "%s: not a JSON object", tj_path);
    else {
        s = llm_meta_set_str(f->meta, "tokenizer.model", "none");
        goto out;
    }
    if (s)
        goto out;

    struct llm_vocab_view w;
    s = llm_file_vocab(f, &w);
    if (s)
        goto out;
    const struct { const char *key; int64_t id; } ids[] = {
        { "tokenizer.bos_id", cfg_ids ? cfg_ids->bos : -1 },
        { "tokenizer.eos_id", cfg_ids ? cfg_ids->eos : -1 },
        { "tokenizer.pad_id", cfg_ids ? cfg_ids->pad : -1 },
        { "tokenizer.unk_id", cfg_ids ? cfg_ids->unk : -1 },
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0] && !s; i++)
        if (ids[i].id >= 0 && ids[i].id < w.n_tokens)
            s = llm_meta_set_i64(f->meta, ids[i].key, ids[i].id);
    if (!s && tc)
        s = apply_tokenizer_config(f, tc, tc_path);
    if (!s && access(jinja, F_OK) == 0) {
        char *text;
        size_t len;
        s = llm_read_file(jinja, MAX_SMALL_JSON, &text, &len);
        if (!s) {
            s = llm_meta_set_strn(f->meta, "chat_template", text, len);
            llm_free(text);
        }
    }
out:
    json_decref(tj);
    json_decref(tc);
    return s;
}
