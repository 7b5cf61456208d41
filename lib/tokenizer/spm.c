/* spm.c: SentencePiece-style BPE over scores (formats.md §2.7), as
 * llama.cpp's llm_tokenizer_spm_session: characters are merged pairwise,
 * always the adjacent pair whose concatenation is the token with the highest
 * score (ties: the leftmost), through a heap, so a word of n characters
 * costs O(n log n). What is left that is not a token falls back to bytes. */
#include "../common/alloc.h"
#include "tok_impl.h"

static llm_status try_bigram(const struct llm_tokenizer *t, struct llm_tok_work *w,
                             const uint8_t *text, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return LLM_OK;
    const struct llm_tok_symbol *l = &w->sym[left], *r = &w->sym[right];
    uint32_t size = l->n + r->n; /* adjacent symbols: one contiguous span */
    int32_t id = llm_tok_lookup(t, text + l->start, size);
    if (id < 0)
        return LLM_OK;
    struct llm_tok_bigram b = { t->scores ? t->scores[id] : 0.0f, left, right, size, 0 };
    return llm_tok_heap_push(w, b);
}

static llm_status byte_fallback(const struct llm_tokenizer *t, const uint8_t *p, size_t n,
                                struct llm_tok_out *o)
{
    for (size_t j = 0; j < n; j++) {
        int32_t id = t->byte_tok[p[j]];
        if (id < 0)
            id = t->unk;
        if (id < 0)
            return llm_error_set(LLM_E_UNSUPPORTED,
                                 "the vocabulary has no token for byte 0x%02X and no <unk>",
                                 p[j]);
        LLM_TRY(llm_tok_out_push(o, id));
    }
    return LLM_OK;
}

llm_status llm_tok_spm_fragment(const struct llm_tokenizer *t, struct llm_tok_work *w,
                                const uint8_t *text, size_t len, struct llm_tok_out *o)
{
    if (len == 0)
        return LLM_OK;
    if (len > INT32_MAX)
        return llm_error_set(LLM_E_INVALID, "text of %zu bytes is too long to tokenize", len);
    LLM_TRY(llm_grow((void **)&w->sym, &w->cap_sym, len, sizeof *w->sym));
    int32_t nsym = 0;
    for (size_t off = 0; off < len; nsym++) {
        /* llama.cpp takes the length from the lead byte alone; a lead byte
         * here takes only the continuation bytes that follow it, so that
         * invalid UTF-8 cannot swallow the U+2581 of an escaped space (same
         * symbols for valid UTF-8) */
        size_t want = llm_tok_utf8_len(text[off]), n = 1;
        while (n < want && off + n < len && (text[off + n] & 0xc0) == 0x80)
            n++;
        w->sym[nsym] = (struct llm_tok_symbol){ (uint32_t)off, (uint32_t)n, nsym - 1,
                                                off + n == len ? -1 : nsym + 1, -1 };
        off += n;
    }
    w->nheap = 0;
    for (int32_t i = 1; i < nsym; i++)
        LLM_TRY(try_bigram(t, w, text, i - 1, i));
    while (w->nheap) {
        struct llm_tok_bigram b = llm_tok_heap_pop(w);
        struct llm_tok_symbol *l = &w->sym[b.left], *r = &w->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side was merged since */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = b.left;
        LLM_TRY(try_bigram(t, w, text, l->prev, b.left));
        LLM_TRY(try_bigram(t, w, text, b.left, l->next));
    }
    /* llama.cpp's resegment() also consults the merges it recorded, but a
     * symbol that is not a token was never merged, so only bytes remain */
    for (int32_t i = 0; i != -1; i = w->sym[i].next) {
        const struct llm_tok_symbol *s = &w->sym[i];
        int32_t id = llm_tok_lookup(t, text + s->start, s->n);
        if (id >= 0)
            LLM_TRY(llm_tok_out_push(o, id));
        else
            LLM_TRY(byte_fallback(t, text + s->start, s->n, o));
    }
    return LLM_OK;
}
