/* tokenizer.c: building a tokenizer from a file's vocabulary, special-token
 * partitioning, and text <-> ids (formats.md §2).
 *
 * The settings follow llama.cpp's llama_vocab::impl::load: per-model
 * defaults, then the file's keys; end-of-generation and FIM tokens found by
 * their text are forced to CONTROL, as llama.cpp does. Deliberate
 * differences, for exact round trips:
 *   - invalid UTF-8 keeps its bytes (llama.cpp turns each into U+FFFD before
 *     byte-level BPE); the pre-tokenizer still sees U+FFFD, so splits agree;
 *   - detokenizing never applies llama.cpp's clean_spaces passes (token
 *     pieces, which is what llama.cpp prints while generating, never do);
 *   - LLM_TOK_ADD_BOS adds BOS only, never EOS. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "../common/alloc.h"
#include "tok_impl.h"

/* GGUF token types (formats.md §2.3) */
enum { TT_UNDEFINED, TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE };

/* ---- small helpers --------------------------------------------------------- */

llm_status llm_tok_out_push(struct llm_tok_out *o, int32_t id)
{
    if (o->n == o->cap)
        LLM_TRY(llm_grow((void **)&o->ids, &o->cap, o->n + 1, sizeof *o->ids));
    o->ids[o->n++] = id;
    return LLM_OK;
}

static int bigram_before(const struct llm_tok_bigram *a, const struct llm_tok_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

llm_status llm_tok_heap_push(struct llm_tok_work *w, struct llm_tok_bigram b)
{
    if (w->nheap == w->cap_heap)
        LLM_TRY(llm_grow((void **)&w->heap, &w->cap_heap, w->nheap + 1, sizeof *w->heap));
    size_t i = w->nheap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!bigram_before(&b, &w->heap[up]))
            break;
        w->heap[i] = w->heap[up];
        i = up;
    }
    w->heap[i] = b;
    return LLM_OK;
}

struct llm_tok_bigram llm_tok_heap_pop(struct llm_tok_work *w)
{
    struct llm_tok_bigram top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0, n = w->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bigram_before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!bigram_before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

void llm_tok_work_free(struct llm_tok_work *w)
{
    llm_free(w->heap);
    llm_free(w->sym);
    llm_free(w->buf);
    llm_tok_split_free(&w->split);
    llm_free(w->wc);
    llm_free(w->wc_slots);
    llm_free(w->wc_ids);
    memset(w, 0, sizeof *w);
}

/* slots: a power of two from 256 to 2^18 by the text length (w->wc_hint);
 * at most half of them are used */
#define WC_MAX_SLOTS ((size_t)1 << 18)
#define WC_MAX_WORD 64

/* A word's ids from the word cache: its entry, or the empty slot
 * where it goes (*slot), or NULL with *slot = NULL when not cacheable. */
struct llm_tok_wc *llm_tok_wc_find(struct llm_tok_work *w, const uint8_t *p, size_t n,
                                  uint32_t **slot)
{
    *slot = NULL;
    if (n > WC_MAX_WORD)
        return NULL;
    if (!w->wc_slots) {
        w->wc_cap = 256;
        while (w->wc_cap < WC_MAX_SLOTS && w->wc_cap < w->wc_hint / 4)
            w->wc_cap <<= 1;
        w->wc_slots = llm_calloc(w->wc_cap, sizeof *w->wc_slots);
        w->wc = llm_malloc(w->wc_cap / 2 * sizeof *w->wc);
        if (!w->wc_slots || !w->wc)
            return NULL; /* no cache: merge every word */
        llm_error_clear();
    }
    size_t mask = w->wc_cap - 1;
    for (size_t h = (size_t)XXH3_64bits(p, n) & mask;; h = (h + 1) & mask) {
        uint32_t e = w->wc_slots[h];
        if (!e) {
            if (w->wc_n < w->wc_cap / 2)
                *slot = &w->wc_slots[h];
            return NULL;
        }
        struct llm_tok_wc *c = &w->wc[e - 1];
        if (c->len == n && memcmp(c->key, p, n) == 0)
            return c;
    }
}

llm_status llm_tok_wc_add(struct llm_tok_work *w, uint32_t *slot, const uint8_t *p, size_t n,
                          const int32_t *ids, size_t from, size_t nids)
{
    if (w->wc_nids + nids > w->wc_capids)
        LLM_TRY(llm_grow((void **)&w->wc_ids, &w->wc_capids, w->wc_nids + nids,
                         sizeof *w->wc_ids));
    if (nids) /* a word can give no ids (bytes the vocabulary lacks) */
        memcpy(w->wc_ids + w->wc_nids, ids + from, nids * sizeof *ids);
    w->wc[w->wc_n] = (struct llm_tok_wc){ p, (uint32_t)n, (uint32_t)w->wc_nids, (uint32_t)nids };
    w->wc_nids += nids;
    *slot = (uint32_t)++w->wc_n;
    return LLM_OK;
}

void llm_tok_wc_reset(struct llm_tok_work *w)
{
    if (w->wc_n)
        memset(w->wc_slots, 0, w->wc_cap * sizeof *w->wc_slots);
    w->wc_n = w->wc_nids = 0;
}

static const uint8_t *tok_text(const struct llm_tokenizer *t, int32_t id, uint32_t *len)
{
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

int32_t llm_tok_lookup(const struct llm_tokenizer *t, const uint8_t *s, size_t n)
{
    if (n == 0 || n > t->max_token_len)
        return -1;
    uint32_t h = (uint32_t)XXH3_64bits(s, n) & t->vmask;
    for (;; h = (h + 1) & t->vmask) {
        uint32_t e = t->vhash[h];
        if (!e)
            return -1;
        uint32_t len;
        const uint8_t *p = tok_text(t, (int32_t)(e - 1), &len);
        if (len == n && memcmp(p, s, n) == 0)
            return (int32_t)(e - 1);
    }
}

static uint32_t merge_hash(const uint8_t *s, size_t n, size_t split)
{
    return (uint32_t)(XXH3_64bits(s, n) ^ ((uint64_t)split * 0x9E3779B97F4A7C15ull));
}

int32_t llm_tok_merge_rank(const struct llm_tokenizer *t, const uint8_t *s, size_t n,
                           size_t split)
{
    if (!t->mhash)
        return -1;
    for (uint32_t h = merge_hash(s, n, split) & t->mmask;; h = (h + 1) & t->mmask) {
        uint32_t e = t->mhash[h];
        if (!e)
            return -1;
        const struct llm_tok_merge *m = &t->merges[e - 1];
        if (m->len == n && m->split == split && memcmp(t->merge_text + m->off, s, n) == 0)
            return (int32_t)(e - 1);
    }
}

static uint32_t table_size(uint32_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)n + 1)
        cap <<= 1;
    return cap;
}

/* ---- construction ------------------------------------------------------------ */

static int meta_str(struct llm_file *f, const char *path, const char **out)
{
    return llm_meta_get_str(f->meta, path, out) == LLM_OK;
}

static int32_t meta_id(const struct llm_tokenizer *t, const char *path, int32_t dflt)
{
    int64_t v;
    if (llm_meta_get_i64(t->f->meta, path, &v) != LLM_OK)
        return dflt;
    return v >= 0 && v < (int64_t)t->n ? (int32_t)v : dflt; /* llama.cpp: bad ids are ignored */
}

static void meta_bool(struct llm_file *f, const char *path, int *v)
{
    int b;
    if (llm_meta_get_bool(f->meta, path, &b) == LLM_OK)
        *v = b;
}

static llm_status build_vocab_hash(struct llm_tokenizer *t)
{
    uint32_t cap = table_size(t->n);
    t->vhash = llm_calloc(cap, sizeof *t->vhash);
    if (!t->vhash)
        return LLM_E_NOMEM;
    t->vmask = cap - 1;
    for (uint32_t id = 0; id < t->n; id++) {
        uint32_t len;
        const uint8_t *p = tok_text(t, (int32_t)id, &len);
        if (len == 0)
            continue; /* never matches text */
        if (len > t->max_token_len)
            t->max_token_len = len;
        uint32_t h = (uint32_t)XXH3_64bits(p, len) & t->vmask;
        for (;; h = (h + 1) & t->vmask) {
            uint32_t e = t->vhash[h], elen;
            if (!e) {
                t->vhash[h] = id + 1;
                break;
            }
            const uint8_t *q = tok_text(t, (int32_t)(e - 1), &elen);
            if (elen == len && memcmp(p, q, len) == 0) {
                t->vhash[h] = id + 1; /* a repeated text: the last id wins, as in llama.cpp */
                break;
            }
        }
    }
    return LLM_OK;
}

static llm_status build_merges(struct llm_tokenizer *t, const struct llm_vocab_view *v,
                               const char *fname)
{
    if (v->n_merges == 0)
        return LLM_OK;
    if (v->n_merges >= (1u << 24))
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: %u merges (at most 16777215)", fname,
                             v->n_merges);
    uint64_t total = v->merge_offsets[v->n_merges];
    t->merges = llm_calloc(v->n_merges, sizeof *t->merges);
    t->merge_text = llm_malloc(total + 1);
    uint32_t cap = table_size(v->n_merges);
    t->mhash = llm_calloc(cap, sizeof *t->mhash);
    if (!t->merges || !t->merge_text || !t->mhash)
        return LLM_E_NOMEM;
    t->mmask = cap - 1;
    uint32_t k = 0;
    for (uint32_t i = 0; i < v->n_merges; i++) {
        const uint8_t *s = v->merge_bytes + v->merge_offsets[i];
        uint32_t n = v->merge_offsets[i + 1] - v->merge_offsets[i];
        /* "left right", split at the first space at index >= 1 */
        const uint8_t *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        struct llm_tok_merge *m = &t->merges[i];
        m->off = k;
        m->result = -1;
        if (!sp) {
            /* llama.cpp keeps it as the pair ("", ""), which never matches */
            m->len = 0;
            continue;
        }
        uint32_t l = (uint32_t)(sp - s);
        memcpy(t->merge_text + k, s, l);
        memcpy(t->merge_text + k + l, sp + 1, n - l - 1);
        m->len = n - 1;
        m->split = l;
        k += n - 1;
        if (l == 0 || m->len == l)
            continue;
        m->result = llm_tok_lookup(t, t->merge_text + m->off, m->len);
        uint32_t h = merge_hash(t->merge_text + m->off, m->len, l) & t->mmask;
        for (;; h = (h + 1) & t->mmask) {
            uint32_t e = t->mhash[h];
            if (!e) {
                t->mhash[h] = i + 1;
                break;
            }
            const struct llm_tok_merge *o = &t->merges[e - 1];
            if (o->len == m->len && o->split == l &&
                memcmp(t->merge_text + o->off, t->merge_text + m->off, m->len) == 0)
                break; /* a repeated pair keeps its first rank */
        }
    }
    t->n_merges = v->n_merges;
    return LLM_OK;
}

static int text_is(const struct llm_tokenizer *t, int32_t id, const char *s)
{
    uint32_t len;
    const uint8_t *p = tok_text(t, id, &len);
    return len == strlen(s) && memcmp(p, s, len) == 0;
}

static int text_in(const struct llm_tokenizer *t, int32_t id, const char *const *list)
{
    for (; *list; list++)
        if (text_is(t, id, *list))
            return 1;
    return 0;
}

/* End-of-generation, EOT and FIM tokens found by their text (llama.cpp's
 * workaround for files that do not name them). */
static void find_special_by_text(struct llm_tokenizer *t)
{
    static const char *const eot_texts[] = { "<|eot_id|>", "<|im_end|>", "<|end|>",
                                             "<end_of_turn>", "<|endoftext|>", "<EOT>",
                                             "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                             NULL };
    static const char *const eog_texts[] = { "<|eot_id|>", "<|im_end|>", "<|end|>",
                                             "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                             "<EOT>", NULL };
    static const char *const fim[6][5] = {
        { "<|fim_prefix|>", "<fim-prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>", NULL },
        { "<|fim_suffix|>", "<fim-suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>", NULL },
        { "<|fim_middle|>", "<fim-middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>", NULL },
        { "<|fim_pad|>", "<fim-pad>", "<PAD>", NULL, NULL },
        { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", NULL },
        { "<|file_sep|>", NULL, NULL, NULL, NULL },
    };
    static const char *const eom_texts[] = { "<|eom_id|>", NULL };
    int32_t fim_id[6] = { -1, -1, -1, -1, -1, -1 };
    for (uint32_t u = 0; u < t->n; u++) {
        int32_t id = (int32_t)u;
        if (t->eot < 0 && text_in(t, id, eot_texts)) {
            t->eot = id;
            t->attr[id] = TOK_ATTR_CONTROL;
        }
        if (t->eom < 0 && text_in(t, id, eom_texts)) {
            t->eom = id;
            t->attr[id] = TOK_ATTR_CONTROL;
        }
        for (int k = 0; k < 6; k++)
            if (fim_id[k] < 0 && text_in(t, id, fim[k])) {
                fim_id[k] = id;
                t->attr[id] = TOK_ATTR_CONTROL;
            }
    }
    for (int k = 3; k < 6; k++) /* FIM pad, repo and file separator end generation */
        if (fim_id[k] >= 0)
            t->eog[fim_id[k]] = 1;
    for (uint32_t u = 0; u < t->n; u++)
        if (text_in(t, (int32_t)u, eog_texts)) {
            t->eog[u] = 1;
            t->attr[u] = TOK_ATTR_CONTROL;
        }
    if (t->eos >= 0)
        t->eog[t->eos] = 1;
    if (t->eot >= 0)
        t->eog[t->eot] = 1;
    if (t->eom >= 0)
        t->eog[t->eom] = 1;
}

static const struct llm_tokenizer *sort_ctx;

static int by_length_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = sort_ctx->off[x + 1] - sort_ctx->off[x];
    uint32_t ly = sort_ctx->off[y + 1] - sort_ctx->off[y];
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static llm_status build_special(struct llm_tokenizer *t)
{
    size_t n = 0;
    for (uint32_t id = 0; id < t->n; id++)
        if ((t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) &&
            t->off[id + 1] > t->off[id])
            n++;
    t->special = llm_malloc((n ? n : 1) * sizeof *t->special);
    if (!t->special)
        return LLM_E_NOMEM;
    n = 0;
    for (uint32_t id = 0; id < t->n; id++)
        if ((t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) &&
            t->off[id + 1] > t->off[id])
            t->special[n++] = (int32_t)id;
    /* a static context: the library is otherwise reentrant, and building a
     * tokenizer is rare; qsort_r is not C11 */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    sort_ctx = t;
    qsort(t->special, n, sizeof *t->special, by_length_desc);
    pthread_mutex_unlock(&mu);
    t->n_special = n;
    return LLM_OK;
}

/* Per-token strip attributes that llama.cpp sets by model name. */
static void name_attrs(struct llm_tokenizer *t)
{
    const char *name;
    if (!meta_str(t->f, "name", &name))
        return;
    char low[256];
    size_t i;
    for (i = 0; name[i] && i + 1 < sizeof low; i++)
        low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    low[i] = 0;
    if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
        return;
    for (size_t k = 0; k < t->n_special; k++)
        t->attr[t->special[k]] |= TOK_ATTR_RSTRIP;
    int32_t id = llm_tok_lookup(t, (const uint8_t *)"</s>", 4);
    if (id >= 0)
        t->attr[id] |= TOK_ATTR_RSTRIP;
    static const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>" };
    for (size_t k = 0; k < 3; k++) {
        id = llm_tok_lookup(t, (const uint8_t *)keep[k], strlen(keep[k]));
        if (id >= 0)
            t->attr[id] &= (uint16_t)~TOK_ATTR_RSTRIP;
    }
}

static int hexval(uint8_t c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The text of every token (llama.cpp's token_to_piece cache). */
static llm_status build_pieces(struct llm_tokenizer *t)
{
    uint64_t total = t->off[t->n] - t->off[0];
    t->pieces = llm_malloc(total + 1);
    t->piece_off = llm_malloc(((size_t)t->n + 1) * sizeof *t->piece_off);
    if (!t->pieces || !t->piece_off)
        return LLM_E_NOMEM;
    uint32_t k = 0;
    for (uint32_t u = 0; u < t->n; u++) {
        uint32_t len;
        const uint8_t *p = tok_text(t, (int32_t)u, &len);
        uint16_t a = t->attr[u];
        t->piece_off[u] = k;
        if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
            memcpy(t->pieces + k, p, len);
            k += len;
        } else if ((a & TOK_ATTR_NORMAL) && t->kind == TOK_KIND_SPM) {
            for (uint32_t i = 0; i < len; i++) {
                if (i + 2 < len && p[i] == 0xe2 && p[i + 1] == 0x96 && p[i + 2] == 0x81) {
                    t->pieces[k++] = ' ';
                    i += 2;
                } else {
                    t->pieces[k++] = (char)p[i];
                }
            }
        } else if (a & TOK_ATTR_NORMAL) {
            /* byte-level: each code point back to its byte; one outside the
             * table keeps its UTF-8 bytes (llama.cpp writes a marker) */
            for (uint32_t i = 0; i < len;) {
                uint32_t cp;
                size_t l = llm_tok_utf8_decode(p + i, len - i, &cp);
                int b = llm_tok_byte_of_cpt(cp);
                if (b >= 0) {
                    t->pieces[k++] = (char)b;
                } else {
                    memcpy(t->pieces + k, p + i, l);
                    k += (uint32_t)l;
                }
                i += (uint32_t)l;
            }
        } else if ((a & TOK_ATTR_BYTE) && t->kind == TOK_KIND_SPM && len >= 5 &&
                   hexval(p[3]) >= 0 && hexval(p[4]) >= 0) {
            t->pieces[k++] = (char)(hexval(p[3]) * 16 + hexval(p[4]));
        }
    }
    t->piece_off[t->n] = k;
    return LLM_OK;
}

static llm_status pre_regexes(struct llm_tokenizer *t, const char *pre, const char *fname)
{
    struct llm_meta *seq = llm_meta_get(t->f->meta, "tokenizer.pre_regex");
    /* a llama.cpp name gives llama.cpp's list; the regexes a Hugging Face
     * import recorded serve when the name says nothing more */
    if (seq && seq->kind == LLM_META_SEQ && seq->n > 0 &&
        (!pre || !*pre || strcmp(pre, "default") == 0 ||
         llm_tok_pretok_new(&t->pre, pre, NULL, 0, fname) != LLM_OK)) {
        llm_tok_pretok_free(t->pre);
        t->pre = NULL;
        llm_error_clear();
        const char *re[8];
        if (seq->n > 8)
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: %zu pre-tokenizer regexes", fname, seq->n);
        for (size_t i = 0; i < seq->n; i++) {
            if (seq->items[i]->kind != LLM_META_STR)
                return llm_error_set(LLM_E_FORMAT, "%s: tokenizer.pre_regex[%zu] is not a string",
                                     fname, i);
            re[i] = seq->items[i]->s;
        }
        return llm_tok_pretok_new(&t->pre, NULL, re, seq->n, fname);
    }
    if (t->pre)
        return LLM_OK;
    return llm_tok_pretok_new(&t->pre, pre ? pre : "", NULL, 0, fname);
}

/* Settings that llama.cpp ties to a BPE pre-tokenizer name. */
static void pre_settings(struct llm_tokenizer *t, const char *pre)
{
    static const char *const ignore_merges[] = { "llama3", "llama-v3", "llama-bpe", "falcon3",
                                                 "tekken", NULL };
    static const char *const add_bos[] = { "llama3", "llama-v3", "llama-bpe", "falcon3",
                                           "tekken", "chameleon", NULL };
    if (!pre)
        return;
    for (const char *const *p = ignore_merges; *p; p++)
        if (strcmp(pre, *p) == 0)
            t->ignore_merges = 1;
    for (const char *const *p = add_bos; *p; p++)
        if (strcmp(pre, *p) == 0)
            t->add_bos = 1;
    if (strcmp(pre, "chatglm-bpe") == 0)
        t->bos = -1;
}

llm_status llm_tokenizer_new(struct llm_tokenizer **out, struct llm_file *f)
{
    const char *fname = f->path ? f->path : "model";
    struct llm_vocab_view v;
    llm_status s = llm_file_vocab(f, &v);
    if (s == LLM_E_NOTFOUND)
        return llm_error_set(s, "%s: the file has no tokenizer vocabulary", fname);
    if (s)
        return s;
    const char *model = NULL, *pre = NULL;
    if (!meta_str(f, "tokenizer.model", &model))
        model = v.n_merges ? "gpt2" : "llama";
    meta_str(f, "tokenizer.pre", &pre);
    int kind;
    if (strcmp(model, "llama") == 0)
        kind = TOK_KIND_SPM;
    else if (strcmp(model, "gpt2") == 0)
        kind = TOK_KIND_BPE;
    else if (strcmp(model, "none") == 0 || strcmp(model, "no_vocab") == 0)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: the file has no tokenizer (model '%s')",
                             fname, model);
    else
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: tokenizer model '%s' is not supported (llama, gpt2)", fname,
                             model);
    if (v.n_tokens == 0)
        return llm_error_set(LLM_E_FORMAT, "%s: the vocabulary is empty", fname);
    if (v.n_tokens > INT32_MAX - 1)
        return llm_error_set(LLM_E_FORMAT, "%s: %u tokens", fname, v.n_tokens);

    struct llm_tokenizer *t = llm_calloc(1, sizeof *t);
    if (!t)
        return LLM_E_NOMEM;
    t->f = f;
    t->kind = kind;
    t->n = v.n_tokens;
    t->bytes = v.bytes;
    t->off = v.offsets;
    t->scores = v.scores;
    t->attr = llm_malloc(t->n * sizeof *t->attr);
    t->eog = llm_calloc(t->n, 1);
    if (!t->attr || !t->eog) {
        s = LLM_E_NOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < t->n; i++) {
        static const uint16_t attr_of[] = { TOK_ATTR_UNDEFINED, TOK_ATTR_NORMAL, TOK_ATTR_UNKNOWN,
                                            TOK_ATTR_CONTROL, TOK_ATTR_USER_DEFINED,
                                            TOK_ATTR_UNUSED, TOK_ATTR_BYTE };
        int32_t ty = v.types ? v.types[i] : TT_NORMAL;
        t->attr[i] = ty >= 0 && ty <= TT_BYTE ? attr_of[ty] : TOK_ATTR_UNDEFINED;
    }

    /* per-model defaults, then the file's keys (formats.md §2.2) */
    if (kind == TOK_KIND_SPM) {
        t->bos = 1, t->eos = 2, t->unk = 0, t->pad = -1;
        t->add_bos = 1, t->add_space_prefix = 1;
    } else {
        t->bos = 11, t->eos = 11, t->unk = -1, t->pad = -1;
        pre_settings(t, pre);
    }
    t->eot = t->eom = -1;
    if (t->bos >= (int32_t)t->n)
        t->bos = -1;
    if (t->eos >= (int32_t)t->n)
        t->eos = -1;
    if (t->unk >= (int32_t)t->n)
        t->unk = -1;
    t->bos = meta_id(t, "tokenizer.bos_id", t->bos);
    t->eos = meta_id(t, "tokenizer.eos_id", t->eos);
    t->unk = meta_id(t, "tokenizer.unk_id", t->unk);
    t->pad = meta_id(t, "tokenizer.pad_id", t->pad);
    t->eot = meta_id(t, "tokenizer.eot_id", t->eot);
    meta_bool(f, "tokenizer.add_bos", &t->add_bos);
    meta_bool(f, "tokenizer.add_eos", &t->add_eos);
    meta_bool(f, "tokenizer.add_space_prefix", &t->add_space_prefix);

    if ((s = build_vocab_hash(t)) || (kind == TOK_KIND_BPE && (s = build_merges(t, &v, fname))))
        goto fail;
    if (kind == TOK_KIND_BPE && (s = pre_regexes(t, pre, fname)))
        goto fail;
    if (kind == TOK_KIND_SPM) {
        t->spm_split = 1;
        for (uint32_t u = 0; u < t->n && t->spm_split; u++) {
            uint32_t len;
            const uint8_t *p = tok_text(t, (int32_t)u, &len);
            for (uint32_t i = 1; i + 3 <= len; i++)
                if (memcmp(p + i, "\xe2\x96\x81", 3) == 0 &&
                    (i < 3 || memcmp(p + i - 3, "\xe2\x96\x81", 3) != 0)) {
                    t->spm_split = 0;
                    break;
                }
        }
    }
    find_special_by_text(t);
    if ((s = build_special(t)) || (s = build_pieces(t)))
        goto fail;
    name_attrs(t);
    for (int b = 0; b < 256; b++) {
        if (kind == TOK_KIND_SPM) {
            static const char hex[] = "0123456789ABCDEF";
            uint8_t name[6] = { '<', '0', 'x', (uint8_t)hex[b >> 4], (uint8_t)hex[b & 15], '>' };
            uint8_t one = (uint8_t)b;
            t->byte_tok[b] = llm_tok_lookup(t, name, 6);
            if (t->byte_tok[b] < 0)
                t->byte_tok[b] = llm_tok_lookup(t, &one, 1);
        } else {
            const struct llm_tok_bytemap *bm = llm_tok_bytemap();
            t->byte_tok[b] = llm_tok_lookup(t, bm->enc[b], bm->enc_len[b]);
        }
    }
    *out = t;
    return LLM_OK;
fail:
    llm_tokenizer_free(t);
    return s;
}

void llm_tokenizer_free(struct llm_tokenizer *t)
{
    if (!t)
        return;
    llm_free(t->attr);
    llm_free(t->vhash);
    llm_free(t->merges);
    llm_free(t->merge_text);
    llm_free(t->mhash);
    llm_free(t->eog);
    llm_free(t->special);
    llm_free(t->pieces);
    llm_free(t->piece_off);
    llm_tok_pretok_free(t->pre);
    llm_free(t);
}

uint32_t llm_tokenizer_n_tokens(const struct llm_tokenizer *t)
{
    return t->n;
}

int32_t llm_tokenizer_bos(const struct llm_tokenizer *t)
{
    return t->bos;
}

int32_t llm_tokenizer_eos(const struct llm_tokenizer *t)
{
    return t->eos;
}

int llm_tokenizer_is_eog(const struct llm_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n && t->eog[id];
}

/* ---- special-token partitioning (formats.md §2.6) ---------------------------- */

struct frag {
    int32_t id; /* -1: raw text */
    size_t off, len;
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static llm_status frag_push(struct frags *l, int32_t id, size_t off, size_t len)
{
    if (l->n == l->cap)
        LLM_TRY(llm_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v));
    l->v[l->n++] = (struct frag){ id, off, len };
    return LLM_OK;
}

static int c_space(uint8_t c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Split every raw-text fragment of `in` at each occurrence of token `id`. */
static llm_status split_on(const struct llm_tokenizer *t, const uint8_t *text, int32_t id,
                           const struct frags *in, struct frags *out)
{
    uint32_t tlen;
    const uint8_t *tok = tok_text(t, id, &tlen);
    uint16_t a = t->attr[id];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        struct frag fr = in->v[i];
        if (fr.id >= 0) {
            LLM_TRY(frag_push(out, fr.id, 0, 0));
            continue;
        }
        size_t base = fr.off, blen = fr.len;
        for (;;) {
            const uint8_t *m = blen >= tlen ? memmem(text + base, blen, tok, tlen) : NULL;
            if (!m) {
                if (blen > 0)
                    LLM_TRY(frag_push(out, -1, base, blen));
                break;
            }
            size_t mpos = (size_t)(m - text), left = mpos - base;
            if (a & TOK_ATTR_LSTRIP)
                while (left > 0 && c_space(text[base + left - 1]))
                    left--;
            if (left > 0)
                LLM_TRY(frag_push(out, -1, base, left));
            LLM_TRY(frag_push(out, id, 0, 0));
            size_t roff = mpos + tlen, rlen = base + blen - roff;
            if (a & TOK_ATTR_RSTRIP)
                while (rlen > 0 && c_space(text[roff]))
                    roff++, rlen--;
            base = roff, blen = rlen;
        }
    }
    return LLM_OK;
}

static llm_status partition(const struct llm_tokenizer *t, const uint8_t *text, size_t len,
                            int parse_special, struct frags *res)
{
    struct frags a = { 0 }, b = { 0 };
    llm_status s = LLM_OK;
    if (len > 0)
        s = frag_push(&a, -1, 0, len);
    for (size_t k = 0; k < t->n_special && !s && a.n; k++) {
        int32_t id = t->special[k];
        if (!parse_special && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)))
            continue; /* user-defined tokens always split */
        s = split_on(t, text, id, &a, &b);
        struct frags tmp = a;
        a = b;
        b = tmp;
    }
    llm_free(b.v);
    if (s) {
        llm_free(a.v);
        return s;
    }
    *res = a;
    return LLM_OK;
}

/* ---- tokenize / detokenize ------------------------------------------------------- */

/* One U+2581-led word of SPM text, through the word cache. */
static llm_status spm_word(const struct llm_tokenizer *t, struct llm_tok_work *w,
                           const uint8_t *p, size_t n, struct llm_tok_out *o)
{
    uint32_t *slot;
    const struct llm_tok_wc *c = llm_tok_wc_find(w, p, n, &slot);
    if (c) {
        for (uint32_t j = 0; j < c->n_ids; j++)
            LLM_TRY(llm_tok_out_push(o, w->wc_ids[c->ids_off + j]));
        return LLM_OK;
    }
    size_t before = o->n;
    LLM_TRY(llm_tok_spm_fragment(t, w, p, n, o));
    return slot ? llm_tok_wc_add(w, slot, p, n, o->ids, before, o->n - before) : LLM_OK;
}

/* SPM text fragment: the dummy-prefix space, then every ' ' as U+2581. */
static llm_status spm_text(const struct llm_tokenizer *t, struct llm_tok_work *w,
                           const uint8_t *p, size_t n, int prefix, struct llm_tok_out *o)
{
    uint64_t need;
    if (!llm_mul_ok(n + 1, 3, &need) || need > SIZE_MAX / 2)
        return llm_error_set(LLM_E_NOMEM, "text too long");
    /* the escaped text lives in its own buffer: spm uses w->sym and w->heap */
    uint8_t *esc = llm_malloc(need);
    if (!esc)
        return LLM_E_NOMEM;
    size_t k = 0;
    if (prefix) {
        memcpy(esc, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ') {
            memcpy(esc + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            esc[k++] = p[i];
        }
    }
    /* when no token has U+2581 after another character, no merge can cross
     * the start of a U+2581 run, so the runs' words merge separately: the
     * same result with small heaps */
    llm_status s = LLM_OK;
    size_t a = 0;
    llm_tok_wc_reset(w); /* the cache keys point into esc */
    for (size_t i = 3; t->spm_split && i + 3 <= k && !s; i++)
        if (memcmp(esc + i, "\xe2\x96\x81", 3) == 0 && memcmp(esc + i - 3, "\xe2\x96\x81", 3) != 0) {
            s = spm_word(t, w, esc + a, i - a, o);
            a = i;
            i += 2;
        }
    if (!s)
        s = t->spm_split ? spm_word(t, w, esc + a, k - a, o) : llm_tok_spm_fragment(t, w, esc, k, o);
    llm_tok_wc_reset(w);
    llm_free(esc);
    return s;
}

llm_status llm_tokenize(const struct llm_tokenizer *t, const char *text, size_t len, int flags,
                        int32_t **ids, size_t *n)
{
    const uint8_t *p = (const uint8_t *)text;
    struct frags fr = { 0 };
    struct llm_tok_out o = { 0 };
    struct llm_tok_work w = { 0 };
    w.wc_hint = len;
    llm_status s = partition(t, p, len, (flags & LLM_TOK_PARSE_SPECIAL) != 0, &fr);
    if (!s && (flags & LLM_TOK_ADD_BOS) && t->add_bos) {
        if (t->bos < 0)
            s = llm_error_set(LLM_E_INVALID, "the model adds BOS but has no BOS token");
        else
            s = llm_tok_out_push(&o, t->bos);
    }
    int prev_special = 1; /* SPM: text at the start or after a token gets the prefix space */
    for (size_t i = 0; i < fr.n && !s; i++) {
        const struct frag *f = &fr.v[i];
        if (f->id >= 0) {
            s = llm_tok_out_push(&o, f->id);
            prev_special = 1;
        } else if (t->kind == TOK_KIND_SPM) {
            s = spm_text(t, &w, p + f->off, f->len, t->add_space_prefix && prev_special, &o);
            prev_special = 0;
        } else {
            s = llm_tok_bpe_fragment(t, &w, p + f->off, f->len, &o);
        }
    }
    llm_free(fr.v);
    llm_tok_work_free(&w);
    if (s) {
        llm_free(o.ids);
        return s;
    }
    if (!o.ids && !(o.ids = llm_malloc(sizeof *o.ids)))
        return LLM_E_NOMEM;
    *ids = o.ids;
    *n = o.n;
    return LLM_OK;
}

static llm_status check_id(const struct llm_tokenizer *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n)
        return llm_error_set(LLM_E_INVALID, "token id %ld is out of range (the vocabulary has %u tokens)",
                             (long)id, t->n);
    return LLM_OK;
}

llm_status llm_token_piece(const struct llm_tokenizer *t, int32_t id, int special,
                           const char **bytes, size_t *len, char buf[8])
{
    (void)buf; /* every piece is precomputed */
    LLM_TRY(check_id(t, id));
    if (!special && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) {
        *bytes = "";
        *len = 0;
        return LLM_OK;
    }
    *bytes = t->pieces + t->piece_off[id];
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return LLM_OK;
}

llm_status llm_token_piece_after(const struct llm_tokenizer *t, int32_t prev, int32_t id,
                                 int special, const char **bytes, size_t *len)
{
    LLM_TRY(llm_token_piece(t, id, special, bytes, len, NULL));
    if (t->add_space_prefix && prev == t->bos && *len > 0 && (*bytes)[0] == ' ')
        (*bytes)++, (*len)--;
    return LLM_OK;
}

llm_status llm_detokenize(const struct llm_tokenizer *t, const int32_t *ids, size_t n,
                          int special, char **text, size_t *len)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *b;
        size_t l;
        LLM_TRY(llm_token_piece(t, ids[i], special, &b, &l, NULL));
        total += l;
    }
    char *out = llm_malloc(total + 1);
    if (!out)
        return LLM_E_NOMEM;
    /* SentencePiece: the dummy-prefix space of the first text token (after
     * a leading BOS) is not part of the text */
    size_t strip_at = t->add_space_prefix ? (n > 0 && ids[0] == t->bos ? 1 : 0) : (size_t)-1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *b;
        size_t l;
        llm_token_piece(t, ids[i], special, &b, &l, NULL);
        if (i == strip_at && l > 0 && b[0] == ' ')
            b++, l--;
        memcpy(out + k, b, l);
        k += l;
    }
    out[k] = 0;
    *text = out;
    *len = k;
    return LLM_OK;
}
