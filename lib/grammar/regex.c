/* regex.c: regular expressions turned into GBNF, for --regex and a JSON
 * Schema's "pattern".
 *
 * The language of the expression: literals and escapes (\n \t \r \f \v
 * \0 \xHH \uHHHH and escaped punctuation), classes with ranges, negation
 * and \d \w \s inside, '.', \d \w \s \D \W \S, groups ( ) and (?: ),
 * alternation, and * + ? {m} {m,} {m,n} (lazy forms too: a lazy
 * quantifier matches the same strings). The whole text must match: a
 * leading ^ and a trailing $ are allowed and change nothing. What a
 * grammar cannot say (back-references, lookaround, word boundaries) is
 * refused by name.
 *
 * Inside a JSON string (a pattern), each character is written as JSON
 * writes it (a quote as \", a newline as \n), and classes leave out the
 * quote, the backslash and control characters, so that the string stays
 * valid JSON: a narrower language, never a wider one.
 */
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "gram_impl.h"
#include "convert.h"

struct rx {
    const char *re, *p, *end, *name;
    int json;               /* inside a JSON string */
    int depth;
    struct gtext *out;
};

static llm_status rx_err(struct rx *x, const char *at, const char *what)
{
    return llm_error_set(LLM_E_UNSUPPORTED, "%s: at offset %d of the expression: %s", x->name,
                         (int)(at - x->re), what);
}

/* One character as the text holds it: in JSON, a quote, a backslash or a
 * control character is its escape. */
static void rx_char(struct rx *x, uint32_t c)
{
    if (x->json && (c == '"' || c == '\\' || c < 0x20)) {
        const char *esc = c == '"' ? "\\\\\\\"" : c == '\\' ? "\\\\\\\\" : c == '\n' ? "\\\\n"
                          : c == '\t' ? "\\\\t" : c == '\r' ? "\\\\r" : NULL;
        if (esc)
            llm_gtext_printf(x->out, "\"%s\"", esc);
        else
            llm_gtext_printf(x->out, "\"\\\\u%04X\"", c);
        return;
    }
    GT_LIT(x->out, "\"");
    llm_gtext_cp(x->out, c, 0);
    GT_LIT(x->out, "\"");
}

/* A class as ranges: r (2 * n), at most RX_MAX_RANGES pairs. */
#define RX_MAX_RANGES 256
struct rclass {
    uint32_t r[2 * RX_MAX_RANGES + 8];
    size_t n;
    int neg;
};

static int cls_add(struct rclass *k, uint32_t lo, uint32_t hi)
{
    if (k->n >= RX_MAX_RANGES)
        return -1;
    k->r[2 * k->n] = lo;
    k->r[2 * k->n + 1] = hi;
    k->n++;
    return 0;
}

/* \d \w \s into k (negated ones are not allowed inside a class). */
static int cls_named(struct rclass *k, char e)
{
    switch (e) {
    case 'd': return cls_add(k, '0', '9');
    case 'w': return cls_add(k, '0', '9') | cls_add(k, 'a', 'z') | cls_add(k, 'A', 'Z') |
                     cls_add(k, '_', '_');
    case 's': return cls_add(k, ' ', ' ') | cls_add(k, '\t', '\r');
    default: return -1;
    }
}

static void cls_emit(struct rx *x, struct rclass *k)
{
    uint32_t out[2 * RX_MAX_RANGES + 8], tmp[2 * RX_MAX_RANGES + 8];
    size_t n = llm_gram_ranges(k->r, k->n, k->neg, out);
    if (x->json) { /* without the quote, the backslash and controls */
        memcpy(tmp, out, 2 * n * sizeof *out);
        size_t m = 0;
        static const uint32_t cut[3][2] = { { 0, 0x1F }, { '"', '"' }, { '\\', '\\' } };
        for (size_t i = 0; i < n; i++) {
            uint32_t lo = tmp[2 * i], hi = tmp[2 * i + 1];
            for (int c = 0; c < 3 && lo <= hi; c++) {
                if (cut[c][1] < lo || cut[c][0] > hi)
                    continue;
                if (cut[c][0] > lo) { /* the part below the cut stays */
                    out[2 * m] = lo, out[2 * m + 1] = cut[c][0] - 1, m++;
                }
                lo = cut[c][1] + 1;
            }
            if (lo <= hi)
                out[2 * m] = lo, out[2 * m + 1] = hi, m++;
        }
        n = m;
    }
    if (!n) { /* matches nothing: a class no text can meet */
        GT_LIT(x->out, "[^\\x00-\\U0010FFFF]");
        return;
    }
    GT_LIT(x->out, "[");
    for (size_t i = 0; i < n; i++) {
        llm_gtext_cp(x->out, out[2 * i], 1);
        if (out[2 * i + 1] != out[2 * i]) {
            GT_LIT(x->out, "-");
            llm_gtext_cp(x->out, out[2 * i + 1], 1);
        }
    }
    GT_LIT(x->out, "]");
}

/* A code point of the expression: UTF-8 or an escape that stands for one
 * character. *cls receives d w s D W S for a named class instead. */
static llm_status rx_cp(struct rx *x, uint32_t *cp, char *cls)
{
    const char *at = x->p;
    unsigned char c = (unsigned char)*x->p++;
    *cls = 0;
    if (c == '\\') {
        if (x->p >= x->end)
            return rx_err(x, at, "the expression ends with '\\'");
        char e = *x->p++;
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : 0;
        if (nhex) {
            uint32_t v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = x->p < x->end ? gram_hex(*x->p) : -1;
                if (h < 0)
                    return rx_err(x, at, "expected hexadecimal digits after \\x or \\u");
                v = v << 4 | (uint32_t)h;
                x->p++;
            }
            *cp = v;
            return LLM_OK;
        }
        if (strchr("dwsDWS", e) && e) {
            *cls = e;
            return LLM_OK;
        }
        if (e == 'b' || e == 'B')
            return rx_err(x, at, "word boundaries (\\b, \\B) cannot be enforced");
        if (e >= '1' && e <= '9')
            return rx_err(x, at, "back-references cannot be enforced");
        const char *from = "ntrfv0", *to = "\n\t\r\f\v";
        const char *k = e ? strchr(from, e) : NULL;
        if (k) {
            *cp = k - from < 5 ? (uint32_t)(unsigned char)to[k - from] : 0;
            return LLM_OK;
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return rx_err(x, at, "unknown escape");
        *cp = (unsigned char)e;
        return LLM_OK;
    }
    return gram_utf8(c, &x->p, x->end, cp) ? rx_err(x, at, "invalid UTF-8") : LLM_OK;
}

static llm_status rx_class(struct rx *x)
{
    const char *at = x->p++;
    struct rclass k = { .neg = x->p < x->end && *x->p == '^' };
    x->p += k.neg;
    int first = 1;
    while (x->p < x->end && (*x->p != ']' || first)) {
        first = 0;
        uint32_t lo, hi;
        char cls;
        LLM_TRY(rx_cp(x, &lo, &cls));
        if (cls) {
            if (cls_named(&k, cls))
                return rx_err(x, at, cls >= 'A' && cls <= 'Z' ? "\\D, \\W and \\S inside a class "
                              "cannot be enforced" : "class too long");
            continue;
        }
        hi = lo;
        if (x->p + 1 < x->end && *x->p == '-' && x->p[1] != ']') {
            x->p++;
            LLM_TRY(rx_cp(x, &hi, &cls));
            if (cls || hi < lo)
                return rx_err(x, at, "bad range in a class");
        }
        if (cls_add(&k, lo, hi))
            return rx_err(x, at, "class too long");
    }
    if (x->p >= x->end)
        return rx_err(x, at, "expected ']'");
    x->p++;
    cls_emit(x, &k);
    return LLM_OK;
}

static llm_status rx_alt(struct rx *x);

static llm_status rx_atom(struct rx *x)
{
    const char *at = x->p;
    char c = *x->p;
    if (c == '(') {
        if (++x->depth > 100)
            return rx_err(x, at, "groups nested too deeply");
        x->p++;
        if (x->p < x->end && *x->p == '?') {
            if (x->p + 1 < x->end && x->p[1] == ':')
                x->p += 2;
            else
                return rx_err(x, at, "lookaround and named groups cannot be enforced");
        }
        GT_LIT(x->out, "(");
        LLM_TRY(rx_alt(x));
        if (x->p >= x->end || *x->p != ')')
            return rx_err(x, at, "expected ')'");
        x->p++;
        x->depth--;
        GT_LIT(x->out, ")");
        return LLM_OK;
    }
    if (c == '[')
        return rx_class(x);
    if (c == '.') {
        x->p++;
        struct rclass k = { .neg = 1 };
        cls_add(&k, '\n', '\n');
        cls_emit(x, &k);
        return LLM_OK;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_err(x, at, "a repetition with nothing to repeat");
    if (c == '^' || c == '$')
        return rx_err(x, at, "'^' and '$' only at the ends");
    uint32_t cp;
    char cls;
    LLM_TRY(rx_cp(x, &cp, &cls));
    if (cls) {
        struct rclass k = { .neg = cls >= 'A' && cls <= 'Z' };
        cls_named(&k, (char)(cls | 0x20));
        cls_emit(x, &k);
    } else {
        rx_char(x, cp);
    }
    return LLM_OK;
}

static llm_status rx_count(struct rx *x, long *v)
{
    const char *at = x->p;
    *v = 0;
    if (x->p >= x->end || *x->p < '0' || *x->p > '9')
        return rx_err(x, at, "expected a number in {m,n}");
    while (x->p < x->end && *x->p >= '0' && *x->p <= '9')
        if ((*v = *v * 10 + (*x->p++ - '0')) > 10000)
            return rx_err(x, at, "repetition bound above 10000");
    return LLM_OK;
}

static llm_status rx_seq(struct rx *x)
{
    int items = 0;
    while (x->p < x->end && *x->p != '|' && *x->p != ')') {
        if (*x->p == '$' && x->p + 1 == x->end && x->depth == 0) {
            x->p++;
            break;
        }
        if (items++)
            GT_LIT(x->out, " ");
        LLM_TRY(rx_atom(x));
        while (x->p < x->end && strchr("*+?{", *x->p) && *x->p) {
            const char *at = x->p;
            if (*x->p == '{') {
                long lo, hi;
                x->p++;
                LLM_TRY(rx_count(x, &lo));
                hi = lo;
                if (x->p < x->end && *x->p == ',') {
                    x->p++;
                    hi = -1;
                    if (x->p < x->end && *x->p != '}')
                        LLM_TRY(rx_count(x, &hi));
                }
                if (x->p >= x->end || *x->p != '}')
                    return rx_err(x, at, "expected '}'");
                x->p++;
                if (hi >= 0 && hi < lo)
                    return rx_err(x, at, "{m,n} with n below m");
                if (hi < 0)
                    llm_gtext_printf(x->out, "{%ld,}", lo);
                else
                    llm_gtext_printf(x->out, "{%ld,%ld}", lo, hi);
            } else {
                llm_gtext_put(x->out, x->p++, 1);
            }
            if (x->p < x->end && *x->p == '?') /* lazy: the same strings */
                x->p++;
            else if (x->p < x->end && *x->p == '+')
                return rx_err(x, x->p, "possessive quantifiers cannot be enforced");
            if (x->p < x->end && strchr("*+?{", *x->p) && *x->p) { /* x** */
                return rx_err(x, x->p, "a repetition of a repetition (use a group)");
            }
        }
    }
    if (!items)
        GT_LIT(x->out, "\"\"");
    return LLM_OK;
}

static llm_status rx_alt(struct rx *x)
{
    GT_LIT(x->out, "(");
    LLM_TRY(rx_seq(x));
    while (x->p < x->end && *x->p == '|') {
        x->p++;
        GT_LIT(x->out, " | ");
        LLM_TRY(rx_seq(x));
    }
    GT_LIT(x->out, ")");
    return LLM_OK;
}

llm_status llm_regex_gbnf_expr(struct gtext *out, const char *re, size_t len, const char *name,
                               int json)
{
    struct rx x = { .re = re, .p = re, .end = re + len, .name = name, .json = json, .out = out };
    if (x.p < x.end && *x.p == '^')
        x.p++;
    LLM_TRY(rx_alt(&x));
    if (x.p < x.end)
        return rx_err(&x, x.p, "unexpected ')'");
    return out->err ? LLM_E_NOMEM : LLM_OK;
}

llm_status llm_regex_to_gbnf(const char *re, size_t len, const char *name, char **gbnf)
{
    struct gtext t = { 0 };
    *gbnf = NULL;
    GT_LIT(&t, "root ::= ");
    llm_status s = llm_regex_gbnf_expr(&t, re, len, name, 0);
    GT_LIT(&t, "\n");
    if (!s && t.err)
        s = LLM_E_NOMEM;
    if (s) {
        llm_free(t.s);
        return s;
    }
    *gbnf = t.s;
    return LLM_OK;
}
