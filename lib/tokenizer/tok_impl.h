/* tok_impl.h: internals shared by the tokenizer files (not installed).
 *
 * unicode.c  code points, categories (utf8proc) and llama.cpp's flags,
 *            the GPT-2 byte <-> code point table
 * pretok.c   the pre-tokenizer regex lists of llama.cpp (formats.md §2.4,
 *            §2.5): two hand-written matchers and PCRE2 for the rest
 * spm.c      SentencePiece-style bigram merging over scores (§2.7)
 * bpe.c      byte-level BPE over ranked merges (§2.8)
 * tokenizer.c construction, special-token partitioning (§2.6), pieces
 * chat.c     chat templates (§5)
 */
#ifndef LLM_TOKENIZER_TOK_IMPL_H
#define LLM_TOKENIZER_TOK_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "tokenizer.h"

/* ---- unicode.c --------------------------------------------------------- */

/* llama.cpp's code point flags (unicode.h there); 0 means "outside the
 * piece", which its matchers test for. */
enum {
    TOK_CPT_UNDEFINED = 0x0001,
    TOK_CPT_NUMBER = 0x0002,
    TOK_CPT_LETTER = 0x0004,
    TOK_CPT_SEPARATOR = 0x0008,
    TOK_CPT_MARK = 0x0010,
    TOK_CPT_PUNCT = 0x0020,
    TOK_CPT_SYMBOL = 0x0040,
    TOK_CPT_CONTROL = 0x0080,
    TOK_CPT_CATEGORIES = 0x00ff,
    TOK_CPT_WHITESPACE = 0x0100,
};

uint16_t llm_tok_cpt_flags(uint32_t cp);

/* Decode one code point the lenient way llama.cpp does (no check for
 * overlong forms or surrogates). Returns the byte length (>= 1); an invalid
 * byte gives *cp = 0xFFFD and length 1. */
size_t llm_tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* UTF-8 encoding of cp (<= 0x10FFFF) into out[4]; returns the length. */
size_t llm_tok_utf8_encode(uint32_t cp, uint8_t *out);
/* Length of the UTF-8 character starting with byte b, from its high nibble
 * (llama.cpp's unicode_len_utf8). */
static inline size_t llm_tok_utf8_len(uint8_t b)
{
    static const uint8_t lut[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    return lut[b >> 4];
}

/* GPT-2 bytes_to_unicode: the UTF-8 bytes of the code point for byte b. */
struct llm_tok_bytemap {
    uint8_t enc[256][2];
    uint8_t enc_len[256];
};
const struct llm_tok_bytemap *llm_tok_bytemap(void);
/* Inverse: the byte of code point cp, or -1 when cp is not in the table. */
int llm_tok_byte_of_cpt(uint32_t cp);

/* ---- pretok.c ---------------------------------------------------------- */

struct llm_tok_pretok;

/* Build the regex list of a llama.cpp pre-tokenizer name, or of `regexes`
 * (n of them) when not NULL. LLM_E_UNSUPPORTED for an unknown name. */
llm_status llm_tok_pretok_new(struct llm_tok_pretok **out, const char *pre,
                              const char *const *regexes, size_t n, const char *fname);
void llm_tok_pretok_free(struct llm_tok_pretok *p);

/* A reusable scratch space for splitting (grown as needed). */
struct llm_tok_split {
    uint32_t *cp;      /* (n) code points (0xFFFD for an invalid byte) */
    uint16_t *flags;   /* (n) */
    uint32_t *boff;    /* (n+1) byte offset of each code point */
    uint8_t *coll;     /* (n) collapsed text for the \p{..} regexes */
    uint8_t *u8;       /* sanitized UTF-8 for the others */
    uint32_t *u8off;   /* (n+1) offset of each code point in u8 */
    uint32_t *u8cp;    /* (u8 bytes + 1) code point index at each u8 offset */
    size_t cap, u8cap;
    size_t *pieces, *next; /* piece lengths in code points */
    size_t npieces, cap_pieces, cap_next;
    void *md;          /* pcre2_match_data, made on first use */
    void *mctx, *jstack; /* match context with a JIT stack that can grow large */
};
void llm_tok_split_free(struct llm_tok_split *s);

/* Split text[0..len) into words; on return s->pieces[0..npieces) are the
 * word lengths in code points and s->boff maps them to bytes. */
llm_status llm_tok_pretok_split(const struct llm_tok_pretok *p, struct llm_tok_split *s,
                                const uint8_t *text, size_t len);

/* ---- the tokenizer ----------------------------------------------------- */

enum { TOK_KIND_SPM = 1, TOK_KIND_BPE = 2 };

/* llama.cpp token attributes (llama.h) */
enum {
    TOK_ATTR_UNDEFINED = 0,
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 7,
    TOK_ATTR_RSTRIP = 1 << 8,
};

struct llm_tok_merge {
    uint32_t off;   /* joined text (left + right) in t->merge_text */
    uint32_t len;   /* bytes of the joined text */
    uint32_t split; /* bytes of the left part */
    int32_t result; /* token id of the joined text, -1 when none */
};

struct llm_tokenizer {
    struct llm_file *f;
    int kind;
    uint32_t n;
    const uint8_t *bytes;
    const uint32_t *off;   /* (n+1) */
    const float *scores;   /* (n) or NULL */
    uint16_t *attr;        /* (n) */
    uint32_t *vhash;       /* open addressing: id + 1, 0 = empty */
    uint32_t vmask;
    uint32_t max_token_len;

    struct llm_tok_merge *merges; /* (n_merges) rank = index */
    uint32_t n_merges;
    uint8_t *merge_text;
    uint32_t *mhash;
    uint32_t mmask;

    int32_t bos, eos, eot, eom, unk, pad;
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    int spm_split;         /* SPM: no token has U+2581 after another character */
    uint8_t *eog;          /* (n) */
    int32_t *special;      /* candidates for partitioning, longest first */
    size_t n_special;
    int32_t byte_tok[256]; /* SPM: <0xXX> (or the byte itself); BPE: encoded byte */

    char *pieces;          /* token pieces as text (special tokens verbatim) */
    uint32_t *piece_off;   /* (n+1) */

    struct llm_tok_pretok *pre;
};

/* Token id of a byte string, -1 when none. */
int32_t llm_tok_lookup(const struct llm_tokenizer *t, const uint8_t *s, size_t n);
/* Rank of the merge (left = s[0..split), right = s[split..n)), -1 when none. */
int32_t llm_tok_merge_rank(const struct llm_tokenizer *t, const uint8_t *s, size_t n,
                           size_t split);

/* Growing output of ids. */
struct llm_tok_out {
    int32_t *ids;
    size_t n, cap;
};
llm_status llm_tok_out_push(struct llm_tok_out *o, int32_t id);

/* The merge queue shared by SPM and BPE: the best pair first (highest score;
 * then the smaller left index). BPE uses score = -rank. */
struct llm_tok_bigram {
    float score;
    int32_t left, right;
    uint32_t size;
    int32_t rank; /* BPE: the merge */
};
struct llm_tok_symbol {
    uint32_t start, n; /* bytes in the word */
    int32_t prev, next;
    int32_t id;        /* BPE: token id when known, -1 otherwise */
};
struct llm_tok_work {
    struct llm_tok_bigram *heap;
    size_t nheap, cap_heap;
    struct llm_tok_symbol *sym;
    size_t cap_sym;
    uint8_t *buf; /* the word being merged */
    size_t cap_buf;
    struct llm_tok_split split;
    /* BPE: the ids of words seen in this call (text repeats its words) */
    struct llm_tok_wc {
        const uint8_t *key;
        uint32_t len, ids_off, n_ids;
    } *wc;
    uint32_t *wc_slots; /* open addressing: entry + 1 */
    size_t wc_n, wc_cap; /* entries, slots */
    size_t wc_hint;      /* bytes of text: sizes the cache */
    int32_t *wc_ids;
    size_t wc_nids, wc_capids;
};
void llm_tok_work_free(struct llm_tok_work *w);
/* The word cache: a word's entry, or NULL and in *slot where to add it
 * (NULL when the word is not cached: too long, or the cache is full). Keys
 * point into the caller's text, which must outlive the entries. */
struct llm_tok_wc *llm_tok_wc_find(struct llm_tok_work *w, const uint8_t *p, size_t n,
                                   uint32_t **slot);
llm_status llm_tok_wc_add(struct llm_tok_work *w, uint32_t *slot, const uint8_t *p, size_t n,
                          const int32_t *ids, size_t from, size_t nids);
void llm_tok_wc_reset(struct llm_tok_work *w);
llm_status llm_tok_heap_push(struct llm_tok_work *w, struct llm_tok_bigram b);
struct llm_tok_bigram llm_tok_heap_pop(struct llm_tok_work *w);

/* spm.c: tokenize one raw-text fragment (spaces already escaped). */
llm_status llm_tok_spm_fragment(const struct llm_tokenizer *t, struct llm_tok_work *w,
                                const uint8_t *text, size_t len, struct llm_tok_out *o);
/* bpe.c: pre-tokenize and tokenize one raw-text fragment. */
llm_status llm_tok_bpe_fragment(const struct llm_tokenizer *t, struct llm_tok_work *w,
                                const uint8_t *text, size_t len, struct llm_tok_out *o);

#endif
