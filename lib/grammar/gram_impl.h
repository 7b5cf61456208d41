/* gram_impl.h: the compiled grammar shared by gbnf.c (which builds it) and
 * match.c (which runs it). Not a public header. */
#ifndef LLM_GRAMMAR_GRAM_IMPL_H
#define LLM_GRAMMAR_GRAM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "grammar.h"

enum { GE_END = 0, GE_SET = 1, GE_RULE = 2 };

/* One element of an alternative: a character set to match, a rule to
 * expand, or the end of the alternative. */
struct gel {
    uint8_t type;
    int32_t arg;            /* GE_SET: charset index; GE_RULE: rule index */
};

/* A set of code points: sorted, disjoint, non-adjacent ranges (negated
 * classes are complemented at compile time), and an ASCII bitmap. */
struct gset {
    uint32_t first, n;      /* ranges lo[first..first+n), hi[...] */
    uint64_t ascii[2];
};

struct grule {
    char *name;
    uint32_t first_alt, n_alt; /* alternatives alt[first_alt..), each an index into el */
};

struct llm_grammar {
    struct gel *el;         /* (n_el) every alternative's elements, each ended by GE_END */
    uint32_t n_el;
    uint32_t *alt;          /* (n_alt) start of each alternative in el */
    uint32_t n_alt;
    struct grule *rules;    /* (n_rules) */
    uint32_t n_rules, root;
    struct gset *sets;      /* (n_sets) */
    uint32_t n_sets;
    uint32_t *lo, *hi;      /* (n_ranges) */
    uint32_t n_ranges;
};

static inline int gset_has(const struct llm_grammar *g, const struct gset *s, uint32_t c)
{
    if (c < 128)
        return (int)((s->ascii[c >> 6] >> (c & 63)) & 1);
    const uint32_t *lo = g->lo + s->first, *hi = g->hi + s->first;
    uint32_t a = 0, b = s->n;
    while (a < b) { /* first range with hi >= c */
        uint32_t m = (a + b) / 2;
        if (hi[m] < c)
            a = m + 1;
        else
            b = m;
    }
    return a < s->n && lo[a] <= c;
}

/* Does the set hold any code point in [a, b]? */
static inline int gset_meets(const struct llm_grammar *g, const struct gset *s, uint32_t a,
                             uint32_t b)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (g->lo[s->first + i] <= b && g->hi[s->first + i] >= a)
            return 1;
    return 0;
}

/* The rules of JSON values: value, object, member, array, string, char,
 * hex, number, int and ws. Whitespace between tokens is one space or one
 * newline and an indent, so that a model cannot loop on whitespace, and
 * digits are bounded too. */
#define GRAM_JSON_RULES                                                                        \
    "value   ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"          \
    "object  ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\"\n"                               \
    "member  ::= string ws \":\" ws value ws\n"                                               \
    "array   ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"                           \
    "string  ::= \"\\\"\" char* \"\\\"\"\n"                                                      \
    "char    ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex hex hex hex )\n" \
    "hex     ::= [0-9a-fA-F]\n"                                                              \
    "number  ::= int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"                      \
    "int     ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"                                        \
    "ws      ::= ( \" \" | \"\\n\" [ \\t]{0,16} )?\n"

/* Ranges r (n lo, hi pairs; reordered) sorted and merged into out (room
 * for n + 1 pairs), complemented over U+0..U+10FFFF when neg; returns the
 * number of pairs. */
size_t llm_gram_ranges(uint32_t *r, size_t n, int neg, uint32_t *out);

/* The value of a hexadecimal digit, or -1. */
static inline int gram_hex(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The code point whose UTF-8 begins with lead byte c, its continuation
 * bytes read from *p (before end; *p advanced). 0, or -1 for bad UTF-8. */
static inline int gram_utf8(unsigned char c, const char **p, const char *end, uint32_t *cp)
{
    if (c < 0x80) {
        *cp = c;
        return 0;
    }
    int n = c >= 0xF0 && c < 0xF5 ? 3 : c >= 0xE0 && c < 0xF0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : -1;
    if (n < 0)
        return -1;
    uint32_t v = c & (0x3Fu >> n);
    for (int i = 0; i < n; i++) {
        if (*p >= end || ((unsigned char)**p & 0xC0) != 0x80)
            return -1;
        v = v << 6 | ((unsigned char)*(*p)++ & 0x3F);
    }
    /* the shortest form only, no surrogates, nothing past U+10FFFF: a
     * converter must never pass on a code point GBNF's escapes refuse */
    static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return -1;
    *cp = v;
    return 0;
}

/* Growable text, for the converters to GBNF. A failed allocation sets
 * err and later calls do nothing. */
struct gtext {
    char *s;
    size_t len, cap;
    int err;
};
void llm_gtext_put(struct gtext *t, const char *s, size_t n);
#define GT_LIT(t, lit) llm_gtext_put((t), (lit), sizeof(lit) - 1)
void llm_gtext_printf(struct gtext *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One code point as GBNF writes it in a literal or a class. */
void llm_gtext_cp(struct gtext *t, uint32_t c, int in_class);

/* Append to out the GBNF expression (one parenthesised group) of regular
 * expression re; json: as the inside of a JSON string (see regex.c). */
llm_status llm_regex_gbnf_expr(struct gtext *out, const char *re, size_t len, const char *name,
                               int json);

#endif
