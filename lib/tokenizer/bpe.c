/* bpe.c: byte-level BPE over ranked merges (formats.md §2.8), as llama.cpp's
 * llm_tokenizer_bpe_session: each pre-tokenized word is byte-encoded
 * (GPT-2 bytes_to_unicode), then the adjacent pair with the lowest merge rank
 * (ties: the leftmost) is merged until none is left; a heap keeps that
 * O(n log n) in the length of the word. */
#include <string.h>

#include "../common/alloc.h"
#include "tok_impl.h"

static llm_status add_bigram(const struct llm_tokenizer *t, struct llm_tok_work *w,
                             int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return LLM_OK;
    const struct llm_tok_symbol *l = &w->sym[left], *r = &w->sym[right];
    int32_t rank = llm_tok_merge_rank(t, w->buf + l->start, l->n + r->n, l->n);
    if (rank < 0)
        return LLM_OK;
    struct llm_tok_bigram b = { -(float)rank, left, right, l->n + r->n, rank };
    return llm_tok_heap_push(w, b);
}

/* One word: bytes p[0..n) of the original text. */
static llm_status word(const struct llm_tokenizer *t, struct llm_tok_work *w, const uint8_t *p,
                       size_t n, struct llm_tok_out *o)
{
    const struct llm_tok_bytemap *bm = llm_tok_bytemap();
    LLM_TRY(llm_grow((void **)&w->buf, &w->cap_buf, 2 * n, 1));
    LLM_TRY(llm_grow((void **)&w->sym, &w->cap_sym, n, sizeof *w->sym));
    /* every original byte becomes one symbol of 1 or 2 encoded bytes */
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        w->sym[i] = (struct llm_tok_symbol){ k, bm->enc_len[b], (int32_t)i - 1,
                                             i + 1 == n ? -1 : (int32_t)i + 1, t->byte_tok[b] };
        w->buf[k++] = bm->enc[b][0];
        if (bm->enc_len[b] == 2)
            w->buf[k++] = bm->enc[b][1];
    }
    if (t->ignore_merges) {
        int32_t id = llm_tok_lookup(t, w->buf, k);
        if (id >= 0)
            return llm_tok_out_push(o, id);
    }
    w->nheap = 0;
    for (size_t i = 1; i < n; i++)
        LLM_TRY(add_bigram(t, w, (int32_t)i - 1, (int32_t)i));
    while (w->nheap) {
        struct llm_tok_bigram b = llm_tok_heap_pop(w);
        struct llm_tok_symbol *l = &w->sym[b.left], *r = &w->sym[b.right];
        /* stale when either side changed since the pair was queued (llama.cpp
         * compares the texts; symbols only grow, so the sizes tell) */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue;
        l->n += r->n;
        l->id = t->merges[b.rank].result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = b.left;
        LLM_TRY(add_bigram(t, w, l->prev, b.left));
        LLM_TRY(add_bigram(t, w, b.left, l->next));
    }
    for (int32_t i = 0; i != -1; i = w->sym[i].next) {
        const struct llm_tok_symbol *s = &w->sym[i];
        if (s->id >= 0) {
            LLM_TRY(llm_tok_out_push(o, s->id));
            continue;
        }
        /* not a token: llama.cpp emits each encoded byte that is one */
        for (uint32_t j = 0; j < s->n; j++) {
            int32_t id = llm_tok_lookup(t, w->buf + s->start + j, 1);
            if (id >= 0)
                LLM_TRY(llm_tok_out_push(o, id));
        }
    }
    return LLM_OK;
}

llm_status llm_tok_bpe_fragment(const struct llm_tokenizer *t, struct llm_tok_work *w,
                                const uint8_t *text, size_t len, struct llm_tok_out *o)
{
    if (len == 0)
        return LLM_OK;
    if (len > INT32_MAX / 2)
        return llm_error_set(LLM_E_INVALID, "text of %zu bytes is too long to tokenize", len);
    struct llm_tok_split *s = &w->split;
    LLM_TRY(llm_tok_pretok_split(t->pre, s, text, len));
    size_t cp = 0;
    for (size_t i = 0; i < s->npieces; i++) {
        size_t a = s->boff[cp], b = s->boff[cp + s->pieces[i]];
        cp += s->pieces[i];
        uint32_t *slot;
        const struct llm_tok_wc *c = llm_tok_wc_find(w, text + a, b - a, &slot);
        if (c) {
            for (uint32_t j = 0; j < c->n_ids; j++)
                LLM_TRY(llm_tok_out_push(o, w->wc_ids[c->ids_off + j]));
            continue;
        }
        size_t before = o->n;
        LLM_TRY(word(t, w, text + a, b - a, o));
        if (slot)
            LLM_TRY(llm_tok_wc_add(w, slot, text + a, b - a, o->ids, before, o->n - before));
    }
    return LLM_OK;
}
