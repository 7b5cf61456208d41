/* gbnf.c: llama.cpp's GBNF grammar language, parsed and compiled into
 * rules of alternatives of elements (gram_impl.h).
 *
 *   root   ::= value ws            # a rule; '#' starts a comment
 *   value  ::= "true" | [0-9]+ | ( "a" | "b" ){2,4} | .
 *
 * Literals and classes take the escapes \xHH \uHHHH \UHHHHHHHH \t \n \r
 * \\ \" \[ \] (and \- \^ \/ in classes). A rule ends at the end of its
 * line, except after '::=' or '|' and inside parentheses. Groups become
 * rules of their own, and repetitions become right-recursive rules:
 * x* is R ::= x R | (empty), x{2,4} is x x R2 with R2 ::= x R1 | (empty)
 * and R1 ::= x | (empty). Right recursion costs nothing at run time (a
 * rule called last does not keep its caller's frame), left recursion
 * would never end and is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "gram_impl.h"

#define GBNF_MAX_REPEAT 10000 /* the largest {m,n} bound */
#define GBNF_MAX_DEPTH 200    /* nested parentheses */

enum { PE_SET = GE_SET, PE_RULE = GE_RULE, PE_ALT = 3 };

/* A rule while it is parsed: its elements, alternatives separated by
 * PE_ALT. */
struct prule {
    char *name;
    struct gel *body;
    size_t n, cap;
    int defined;
    size_t ref_at;          /* where it was first referenced (for "undefined") */
};

/* A character set while it is parsed. */
struct pset {
    uint32_t *r;            /* (2 * n) lo, hi pairs */
    size_t n, cap;
    int neg;
};

struct parser {
    const char *src, *p, *end, *name;
    struct prule *rules;
    size_t n_rules, cap_rules;
    struct pset *sets;
    size_t n_sets, cap_sets;
    int depth;
};

/* An error at position `at`, as NAME:LINE:COL. */
static llm_status perr(struct parser *ps, const char *at, const char *what)
{
    int line = 1, col = 1;
    for (const char *q = ps->src; q < at && q < ps->end; q++) {
        if (*q == '\n')
            line++, col = 1;
        else if (((unsigned char)*q & 0xC0) != 0x80)
            col++;
    }
    return llm_error_set(LLM_E_FORMAT, "%s:%d:%d: %s", ps->name, line, col, what);
}

static int is_word(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static void skip_space(struct parser *ps, int newlines)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines))
            ps->p++;
        else if (c == '#')
            while (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r')
                ps->p++;
        else
            break;
    }
}

/* A new rule named name (len bytes); -1 and *st on failure. */
static int32_t add_rule(struct parser *ps, const char *name, size_t len, llm_status *st)
{
    void *r = ps->rules;
    if ((*st = llm_grow(&r, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)))
        return -1;
    ps->rules = r;
    struct prule *nr = &ps->rules[ps->n_rules];
    memset(nr, 0, sizeof *nr);
    nr->ref_at = (size_t)(ps->p - ps->src);
    if (!(nr->name = llm_strndup(name, len))) {
        *st = LLM_E_NOMEM;
        return -1;
    }
    return (int32_t)ps->n_rules++;
}

/* The rule of a source's name, made at its first reference. */
static int32_t rule_id(struct parser *ps, const char *name, size_t len, llm_status *st)
{
    for (size_t i = 0; i < ps->n_rules; i++)
        if (strlen(ps->rules[i].name) == len && memcmp(ps->rules[i].name, name, len) == 0)
            return (int32_t)i;
    return add_rule(ps, name, len, st);
}

/* A new rule for a group or a repetition: "NAME/N", NAME its source
 * rule's ('/' cannot occur in a source's names, so none collides). */
static int32_t new_rule(struct parser *ps, int32_t parent, llm_status *st)
{
    char name[256];
    const char *pn = ps->rules[parent].name;
    int n = snprintf(name, sizeof name, "%.*s/%zu",
                     (int)(strcspn(pn, "/") < 200 ? strcspn(pn, "/") : 200), pn, ps->n_rules);
    int32_t id = add_rule(ps, name, (size_t)n, st);
    if (id >= 0)
        ps->rules[id].defined = 1;
    return id;
}

static llm_status push(struct parser *ps, int32_t rule, uint8_t type, int32_t arg)
{
    struct prule *r = &ps->rules[rule];
    void *b = r->body;
    LLM_TRY(llm_grow(&b, &r->cap, r->n + 1, sizeof *r->body));
    r->body = b;
    r->body[r->n++] = (struct gel){ .type = type, .arg = arg };
    return LLM_OK;
}

static llm_status new_set(struct parser *ps, int neg, int32_t *id)
{
    void *s = ps->sets;
    LLM_TRY(llm_grow(&s, &ps->cap_sets, ps->n_sets + 1, sizeof *ps->sets));
    ps->sets = s;
    memset(&ps->sets[ps->n_sets], 0, sizeof *ps->sets);
    ps->sets[ps->n_sets].neg = neg;
    *id = (int32_t)ps->n_sets++;
    return LLM_OK;
}

static llm_status set_add(struct parser *ps, int32_t id, uint32_t lo, uint32_t hi)
{
    struct pset *s = &ps->sets[id];
    void *r = s->r;
    size_t cap = s->cap;
    LLM_TRY(llm_grow(&r, &cap, 2 * (s->n + 1), sizeof *s->r));
    s->r = r;
    s->cap = cap;
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return LLM_OK;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. */
static llm_status parse_char(struct parser *ps, int in_class, uint32_t *cp)
{
    const char *at = ps->p;
    if (ps->p >= ps->end)
        return perr(ps, at, in_class ? "expected ']' to end the class" : "expected '\"' to end the literal");
    unsigned char c = (unsigned char)*ps->p++;
    if (c == '\\') {
        if (ps->p >= ps->end)
            return perr(ps, at, "expected an escape after '\\'");
        char e = *ps->p++;
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            uint32_t v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = ps->p < ps->end ? gram_hex(*ps->p) : -1;
                if (h < 0)
                    return perr(ps, ps->p, "expected a hexadecimal digit in the escape");
                v = v << 4 | (uint32_t)h;
                ps->p++;
            }
            if (v > 0x10FFFF)
                return perr(ps, at, "escape beyond U+10FFFF");
            *cp = v;
            return LLM_OK;
        }
        switch (e) {
        case 't': *cp = '\t'; return LLM_OK;
        case 'n': *cp = '\n'; return LLM_OK;
        case 'r': *cp = '\r'; return LLM_OK;
        case '\\': case '"': case '[': case ']': *cp = (uint32_t)e; return LLM_OK;
        case '-': case '^': case '/':
            if (in_class) {
                *cp = (uint32_t)e;
                return LLM_OK;
            }
            break;
        default: break;
        }
        return perr(ps, at, "unknown escape (expected one of \\x \\u \\U \\t \\n \\r \\\\ \\\" \\[ \\])");
    }
    return gram_utf8(c, &ps->p, ps->end, cp) ? perr(ps, at, "invalid UTF-8") : LLM_OK;
}

static llm_status parse_int(struct parser *ps, int *v)
{
    const char *at = ps->p;
    long x = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return perr(ps, at, "expected a number in the repetition");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        x = x * 10 + (*ps->p++ - '0');
        if (x > GBNF_MAX_REPEAT)
            return perr(ps, at, "repetition bound above 10000");
    }
    *v = (int)x;
    return LLM_OK;
}

/* The item body[from..n) of `rule`, repeated min to max times (max < 0:
 * no bound). */
static llm_status repeat(struct parser *ps, int32_t rule, size_t from, int min, int max)
{
    llm_status st = LLM_OK;
    struct prule *r = &ps->rules[rule];
    struct gel item;
    if (r->n - from == 1) {
        item = r->body[from];
    } else { /* a literal of several characters: a rule of its own */
        int32_t sub = new_rule(ps, rule, &st);
        if (sub < 0)
            return st;
        r = &ps->rules[rule];
        for (size_t i = from; i < r->n; i++) {
            LLM_TRY(push(ps, sub, r->body[i].type, r->body[i].arg));
            r = &ps->rules[rule];
        }
        item = (struct gel){ .type = PE_RULE, .arg = sub };
    }
    ps->rules[rule].n = from;
    for (int i = 0; i < min; i++)
        LLM_TRY(push(ps, rule, item.type, item.arg));
    if (max == min)
        return LLM_OK;
    int32_t tail;
    if (max < 0) { /* R ::= item R | (empty) */
        if ((tail = new_rule(ps, rule, &st)) < 0)
            return st;
        LLM_TRY(push(ps, tail, item.type, item.arg));
        LLM_TRY(push(ps, tail, PE_RULE, tail));
        LLM_TRY(push(ps, tail, PE_ALT, 0));
    } else { /* R1 ::= item | (empty); Rk ::= item R(k-1) | (empty) */
        tail = -1;
        for (int k = 1; k <= max - min; k++) {
            int32_t rk = new_rule(ps, rule, &st);
            if (rk < 0)
                return st;
            LLM_TRY(push(ps, rk, item.type, item.arg));
            if (tail >= 0)
                LLM_TRY(push(ps, rk, PE_RULE, tail));
            LLM_TRY(push(ps, rk, PE_ALT, 0));
            tail = rk;
        }
    }
    return push(ps, rule, PE_RULE, tail);
}

static llm_status parse_alternates(struct parser *ps, int32_t rule, int nested);

static llm_status parse_sequence(struct parser *ps, int32_t rule, int nested)
{
    size_t last = (size_t)-1; /* where the last item starts in the body */
    llm_status st = LLM_OK;
    while (ps->p < ps->end) {
        const char *at = ps->p;
        char c = *ps->p;
        if (c == '"') {
            ps->p++;
            last = ps->rules[rule].n;
            while (ps->p < ps->end && *ps->p != '"') {
                uint32_t cp;
                int32_t id;
                LLM_TRY(parse_char(ps, 0, &cp));
                LLM_TRY(new_set(ps, 0, &id));
                LLM_TRY(set_add(ps, id, cp, cp));
                LLM_TRY(push(ps, rule, PE_SET, id));
            }
            if (ps->p >= ps->end)
                return perr(ps, at, "expected '\"' to end the literal");
            ps->p++;
            if (ps->rules[rule].n == last) /* "" matches the empty string */
                last = (size_t)-1;
        } else if (c == '[') {
            ps->p++;
            int32_t id;
            int neg = ps->p < ps->end && *ps->p == '^';
            ps->p += neg;
            LLM_TRY(new_set(ps, neg, &id));
            while (ps->p < ps->end && *ps->p != ']') {
                uint32_t lo, hi;
                LLM_TRY(parse_char(ps, 1, &lo));
                hi = lo;
                if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
                    ps->p++;
                    LLM_TRY(parse_char(ps, 1, &hi));
                    if (hi < lo)
                        return perr(ps, at, "character range out of order");
                }
                LLM_TRY(set_add(ps, id, lo, hi));
            }
            if (ps->p >= ps->end)
                return perr(ps, at, "expected ']' to end the class");
            ps->p++;
            last = ps->rules[rule].n;
            LLM_TRY(push(ps, rule, PE_SET, id));
        } else if (c == '.') {
            ps->p++;
            int32_t id;
            LLM_TRY(new_set(ps, 1, &id)); /* the complement of nothing */
            last = ps->rules[rule].n;
            LLM_TRY(push(ps, rule, PE_SET, id));
        } else if (is_word((unsigned char)c)) {
            const char *s = ps->p; /* rule_id records it as the reference's place */
            size_t len = 0;
            while (s + len < ps->end && is_word((unsigned char)s[len]))
                len++;
            int32_t id = rule_id(ps, s, len, &st);
            if (id < 0)
                return st;
            ps->p = s + len;
            last = ps->rules[rule].n;
            LLM_TRY(push(ps, rule, PE_RULE, id));
        } else if (c == '(') {
            if (++ps->depth > GBNF_MAX_DEPTH)
                return perr(ps, at, "parentheses nested too deeply");
            ps->p++;
            skip_space(ps, 1);
            int32_t sub = new_rule(ps, rule, &st);
            if (sub < 0)
                return st;
            LLM_TRY(parse_alternates(ps, sub, 1));
            if (ps->p >= ps->end || *ps->p != ')')
                return perr(ps, ps->p, "expected ')'");
            ps->p++;
            ps->depth--;
            last = ps->rules[rule].n;
            LLM_TRY(push(ps, rule, PE_RULE, sub));
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == (size_t)-1)
                return perr(ps, at, "expected an item before the repetition");
            int min = c == '+', max = c == '?' ? 1 : -1;
            ps->p++;
            if (c == '{') {
                skip_space(ps, 0);
                LLM_TRY(parse_int(ps, &min));
                skip_space(ps, 0);
                max = min;
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    skip_space(ps, 0);
                    max = -1;
                    if (ps->p < ps->end && *ps->p != '}')
                        LLM_TRY(parse_int(ps, &max));
                    skip_space(ps, 0);
                }
                if (ps->p >= ps->end || *ps->p != '}')
                    return perr(ps, ps->p, "expected '}' to end the repetition");
                ps->p++;
                if (max >= 0 && max < min)
                    return perr(ps, at, "repetition with its maximum below its minimum");
            }
            LLM_TRY(repeat(ps, rule, last, min, max));
            last = (size_t)-1; /* x** is an error, as in llama.cpp */
        } else {
            break;
        }
        skip_space(ps, nested);
    }
    return LLM_OK;
}

static llm_status parse_alternates(struct parser *ps, int32_t rule, int nested)
{
    LLM_TRY(parse_sequence(ps, rule, nested));
    while (ps->p < ps->end && *ps->p == '|') {
        LLM_TRY(push(ps, rule, PE_ALT, 0));
        ps->p++;
        skip_space(ps, 1);
        LLM_TRY(parse_sequence(ps, rule, nested));
    }
    return LLM_OK;
}

static llm_status parse_rule(struct parser *ps)
{
    const char *at = ps->p;
    size_t len = 0;
    while (at + len < ps->end && is_word((unsigned char)at[len]))
        len++;
    if (!len)
        return perr(ps, at, "expected a rule name");
    llm_status st = LLM_OK;
    int32_t id = rule_id(ps, at, len, &st);
    if (id < 0)
        return st;
    if (ps->rules[id].defined)
        return perr(ps, at, "rule defined twice");
    ps->rules[id].defined = 1;
    ps->p = at + len;
    skip_space(ps, 0);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0)
        return perr(ps, ps->p, "expected '::='");
    ps->p += 3;
    skip_space(ps, 1);
    LLM_TRY(parse_alternates(ps, id, 0));
    if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r')
        return perr(ps, ps->p, *ps->p == ')' ? "unexpected ')'" : "expected the end of the line");
    return LLM_OK;
}

/* Sorted, merged ranges; a negated set complemented over U+0..U+10FFFF. */
size_t llm_gram_ranges(uint32_t *r, size_t n, int neg, uint32_t *out)
{
    for (size_t i = 1; i < n; i++) /* insertion sort: classes are short */
        for (size_t j = i; j > 0 && r[2 * (j - 1)] > r[2 * j]; j--) {
            uint32_t a = r[2 * j], b = r[2 * j + 1];
            r[2 * j] = r[2 * (j - 1)], r[2 * j + 1] = r[2 * (j - 1) + 1];
            r[2 * (j - 1)] = a, r[2 * (j - 1) + 1] = b;
        }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1])
                r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i], r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    if (!neg) {
        if (m)
            memcpy(out, r, 2 * m * sizeof *r);
        return m;
    }
    size_t k = 0;
    uint32_t next = 0;
    for (size_t i = 0; i < m; i++) {
        if (r[2 * i] > next)
            out[2 * k] = next, out[2 * k + 1] = r[2 * i] - 1, k++;
        next = r[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF)
        out[2 * k] = next, out[2 * k + 1] = 0x10FFFF, k++;
    return k;
}

/* Rules that can match the empty string. */
static void find_nullable(const struct llm_grammar *g, uint8_t *nullable)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (nullable[r])
                continue;
            for (uint32_t a = 0; a < g->rules[r].n_alt && !nullable[r]; a++) {
                const struct gel *e = g->el + g->alt[g->rules[r].first_alt + a];
                while (e->type == GE_RULE && nullable[e->arg])
                    e++;
                if (e->type == GE_END)
                    nullable[r] = 1, changed = 1;
            }
        }
    }
}

/* Left recursion: a rule that calls itself again, through rules that can
 * match the empty string, before reading a character. Where every call on
 * the way is a tail call (the last element of its alternative, as in
 * R ::= x R with x able to be empty), nothing is pushed and the matcher's
 * closure ends by itself; where one call is not, each round pushes a frame
 * and it never ends. So: the graph of calls made before the first
 * character, its strongly connected components (Tarjan's, with a stack of
 * its own: grammars may chain many rules), and a non-tail call inside one
 * component is the error. */
struct ledge {
    uint32_t to;
    uint8_t tail;
};

struct tframe {
    uint32_t v, next;       /* the rule and its next edge to follow */
};

/* Returns a rule of a left-recursive cycle, or -1; LLM_E_NOMEM as -2. */
static int32_t left_recursive(const struct llm_grammar *g, const uint8_t *nullable)
{
    const uint32_t n = g->n_rules;
    uint32_t *first = llm_calloc((size_t)n + 1, sizeof *first);
    struct ledge *e = NULL;
    size_t n_e = 0, cap_e = 0;
    int32_t found = first ? -1 : -2;
    for (uint32_t r = 0; r < n && found == -1; r++) {
        first[r] = (uint32_t)n_e;
        for (uint32_t a = 0; a < g->rules[r].n_alt && found == -1; a++)
            for (const struct gel *x = g->el + g->alt[g->rules[r].first_alt + a];
                 x->type == GE_RULE; x++) {
                void *p = e;
                if (llm_grow(&p, &cap_e, n_e + 1, sizeof *e)) {
                    found = -2;
                    break;
                }
                e = p;
                e[n_e++] = (struct ledge){ (uint32_t)x->arg, x[1].type == GE_END };
                if (!nullable[x->arg])
                    break;
            }
    }
    if (found == -1)
        first[n] = (uint32_t)n_e;
    uint32_t *idx = llm_malloc((size_t)n * sizeof *idx), *low = llm_malloc((size_t)n * sizeof *low);
    uint32_t *comp = llm_malloc((size_t)n * sizeof *comp), *stk = llm_malloc((size_t)n * sizeof *stk);
    struct tframe *call = llm_malloc((size_t)n * sizeof *call);
    uint8_t *on = llm_calloc((size_t)n + 1, 1);
    if (!idx || !low || !comp || !stk || !call || !on)
        found = -2;
    const uint32_t NONE = UINT32_MAX;
    uint32_t counter = 0, n_stk = 0, n_comp = 0;
    for (uint32_t v = 0; found == -1 && v < n; v++)
        idx[v] = NONE;
    for (uint32_t root = 0; found == -1 && root < n; root++) {
        if (idx[root] != NONE)
            continue;
        uint32_t depth = 0;
        call[depth++] = (struct tframe){ root, first[root] };
        idx[root] = low[root] = counter++;
        stk[n_stk++] = root;
        on[root] = 1;
        while (depth) {
            struct tframe *f = &call[depth - 1];
            if (f->next < first[f->v + 1]) {
                uint32_t w = e[f->next++].to;
                if (idx[w] == NONE) {
                    idx[w] = low[w] = counter++;
                    stk[n_stk++] = w;
                    on[w] = 1;
                    call[depth++] = (struct tframe){ w, first[w] };
                } else if (on[w] && idx[w] < low[f->v]) {
                    low[f->v] = idx[w];
                }
                continue;
            }
            uint32_t v = f->v;
            if (low[v] == idx[v]) { /* v heads a component: pop it */
                uint32_t w;
                do {
                    w = stk[--n_stk];
                    on[w] = 0;
                    comp[w] = n_comp;
                } while (w != v);
                n_comp++;
            }
            if (--depth && low[v] < low[call[depth - 1].v])
                low[call[depth - 1].v] = low[v];
        }
    }
    for (uint32_t r = 0; found == -1 && r < n; r++)
        for (uint32_t k = first[r]; k < first[r + 1]; k++)
            if (!e[k].tail && comp[e[k].to] == comp[r]) {
                found = (int32_t)e[k].to;
                break;
            }
    llm_free(first);
    llm_free(e);
    llm_free(idx);
    llm_free(low);
    llm_free(comp);
    llm_free(stk);
    llm_free(call);
    llm_free(on);
    return found;
}

/* The source's name of a rule (a group's rule "x/12" is part of x). */
static const char *user_name(const struct llm_grammar *g, uint32_t r, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s", (int)strcspn(g->rules[r].name, "/"), g->rules[r].name);
    return buf;
}

static llm_status compile(struct parser *ps, struct llm_grammar *g)
{
    size_t n_el = 0, n_alt = 0, n_ranges = 0;
    for (size_t i = 0; i < ps->n_rules; i++) {
        n_alt++;
        for (size_t j = 0; j < ps->rules[i].n; j++)
            n_alt += ps->rules[i].body[j].type == PE_ALT;
        n_el += ps->rules[i].n + 1;
    }
    for (size_t i = 0; i < ps->n_sets; i++)
        n_ranges += ps->sets[i].n + 1;
    g->el = llm_malloc(n_el * sizeof *g->el);
    g->alt = llm_malloc(n_alt * sizeof *g->alt);
    g->rules = llm_calloc(ps->n_rules, sizeof *g->rules);
    g->sets = llm_calloc(ps->n_sets ? ps->n_sets : 1, sizeof *g->sets);
    g->lo = llm_malloc((n_ranges + 1) * sizeof *g->lo);
    g->hi = llm_malloc((n_ranges + 1) * sizeof *g->hi);
    uint32_t *tmp = llm_malloc((2 * n_ranges + 2) * sizeof *tmp);
    if (!g->el || !g->alt || !g->rules || !g->sets || !g->lo || !g->hi || !tmp) {
        llm_free(tmp);
        return LLM_E_NOMEM;
    }
    g->n_rules = (uint32_t)ps->n_rules;
    for (size_t i = 0; i < ps->n_rules; i++) {
        struct prule *pr = &ps->rules[i];
        struct grule *r = &g->rules[i];
        r->name = pr->name;
        pr->name = NULL;
        r->first_alt = g->n_alt;
        g->alt[g->n_alt++] = g->n_el;
        r->n_alt = 1;
        for (size_t j = 0; j < pr->n; j++) {
            if (pr->body[j].type == PE_ALT) {
                g->el[g->n_el++] = (struct gel){ .type = GE_END };
                g->alt[g->n_alt++] = g->n_el;
                r->n_alt++;
            } else {
                g->el[g->n_el++] = pr->body[j];
            }
        }
        g->el[g->n_el++] = (struct gel){ .type = GE_END };
    }
    g->n_sets = (uint32_t)ps->n_sets;
    for (size_t i = 0; i < ps->n_sets; i++) {
        struct pset *s = &ps->sets[i];
        size_t m = llm_gram_ranges(s->r, s->n, s->neg, tmp);
        struct gset *gs = &g->sets[i];
        gs->first = g->n_ranges;
        gs->n = (uint32_t)m;
        for (size_t k = 0; k < m; k++) {
            g->lo[g->n_ranges] = tmp[2 * k];
            g->hi[g->n_ranges++] = tmp[2 * k + 1];
            for (uint32_t c = tmp[2 * k]; c <= tmp[2 * k + 1] && c < 128; c++)
                gs->ascii[c >> 6] |= 1ull << (c & 63);
        }
    }
    llm_free(tmp);
    return LLM_OK;
}

static void parser_free(struct parser *ps)
{
    for (size_t i = 0; i < ps->n_rules; i++) {
        llm_free(ps->rules[i].name);
        llm_free(ps->rules[i].body);
    }
    for (size_t i = 0; i < ps->n_sets; i++)
        llm_free(ps->sets[i].r);
    llm_free(ps->rules);
    llm_free(ps->sets);
}

void llm_grammar_free(struct llm_grammar *g)
{
    if (!g)
        return;
    for (uint32_t i = 0; i < g->n_rules; i++)
        llm_free(g->rules[i].name);
    llm_free(g->el);
    llm_free(g->alt);
    llm_free(g->rules);
    llm_free(g->sets);
    llm_free(g->lo);
    llm_free(g->hi);
    llm_free(g);
}

/* ---- inlining ----
 * A small rule called from another is replaced by its alternatives:
 * R ::= char R | (empty) with char ::= [a] | "\\" [b] becomes R ::= [a] R |
 * "\\" [b] R | (empty). The language is the same; what changes is how
 * far a token can be followed from a position without leaving its rule:
 * the token classes of a position are exact only up to the end of its
 * rule, so a one-character rule would leave every longer token to be
 * checked at run time. */

#define INLINE_MAX_EL 24      /* a rule this small (elements) is inlined */
#define INLINE_MAX_ALT 4
#define INLINE_MAX_OUT 16     /* alternatives a rule may grow to */

/* Can rule s reach itself? (A search cut short says yes.) */
static int recursive(const struct parser *ps, int32_t s, uint8_t *seen)
{
    enum { MAX_SEEN = 64 };
    int32_t todo[MAX_SEEN + 1], visited[MAX_SEEN + 1];
    int32_t n_todo = 0, n_seen = 0, hit = 0;
    todo[n_todo++] = s;
    while (n_todo && !hit) {
        const struct prule *r = &ps->rules[todo[--n_todo]];
        for (size_t i = 0; i < r->n && !hit; i++) {
            int32_t t = r->body[i].arg;
            if (r->body[i].type != PE_RULE || seen[t])
                continue;
            if (t == s || n_seen == MAX_SEEN) {
                hit = 1;
                break;
            }
            seen[t] = 1;
            visited[n_seen++] = t;
            todo[n_todo++] = t;
        }
    }
    for (int32_t i = 0; i < n_seen; i++)
        seen[visited[i]] = 0;
    return hit;
}

static size_t n_alts(const struct prule *r)
{
    size_t k = 1;
    for (size_t i = 0; i < r->n; i++)
        k += r->body[i].type == PE_ALT;
    return k;
}

/* The elements of alternative a of r: *n of them from the returned one. */
static const struct gel *alt_of(const struct prule *r, size_t a, size_t *n)
{
    size_t i = 0;
    for (size_t k = 0; k < a; i++)
        k += r->body[i].type == PE_ALT;
    size_t j = i;
    while (j < r->n && r->body[j].type != PE_ALT)
        j++;
    *n = j - i;
    return *n ? r->body + i : NULL; /* an empty rule has no body at all */
}

/* Append n elements to each sequence of *seq (n_seq elements: sequences
 * separated by PE_ALT), into a new buffer; one sequence grows in place. */
static llm_status append_each(struct gel **seq, size_t *n_seq, size_t *cap, size_t seqs,
                              const struct gel *el, size_t n)
{
    if (!n)
        return LLM_OK;
    void *v = *seq;
    if (seqs == 1) {
        LLM_TRY(llm_grow(&v, cap, *n_seq + n, sizeof **seq));
        *seq = v;
        memcpy(*seq + *n_seq, el, n * sizeof **seq);
        *n_seq += n;
        return LLM_OK;
    }
    struct gel *nt = NULL;
    size_t n_nt = 0, cap_nt = 0, from = 0;
    v = NULL;
    LLM_TRY(llm_grow(&v, &cap_nt, *n_seq + seqs * n, sizeof *nt));
    nt = v;
    for (size_t j = 0; j <= *n_seq; j++) {
        if (j < *n_seq && (*seq)[j].type != PE_ALT)
            continue;
        memcpy(nt + n_nt, *seq + from, (j - from) * sizeof *nt);
        n_nt += j - from;
        memcpy(nt + n_nt, el, n * sizeof *nt);
        n_nt += n;
        if (j < *n_seq)
            nt[n_nt++] = (*seq)[j];
        from = j + 1;
    }
    llm_free(*seq);
    *seq = nt;
    *n_seq = n_nt;
    *cap = cap_nt;
    return LLM_OK;
}

/* Rule r with the small rules it calls inlined (r->body replaced). An
 * alternative's elements collect in a run that is appended to all its
 * sequences at once, when a call of several alternatives multiplies them
 * (at most log2(INLINE_MAX_OUT) times) and at its end: linear in its
 * length, however long a literal it spells. */
static llm_status inline_into(struct parser *ps, int32_t r, const uint8_t *small, int *changed)
{
    struct prule *pr = &ps->rules[r];
    struct gel *out = NULL, *tmp = NULL, *run = NULL;
    size_t n_out = 0, cap_out = 0, n_tmp = 0, cap_tmp = 0, n_run = 0, cap_run = 0, alts_out = 0;
    llm_status st = LLM_OK;
    int inlined = 0;
    void *v;
    /* each alternative becomes the sequences of its expansion, kept in tmp
     * separated by PE_ALT; then appended to out */
    for (size_t a = 0, na = n_alts(pr); a < na && !st; a++) {
        size_t len;
        const struct gel *e = alt_of(pr, a, &len);
        n_tmp = n_run = 0;
        size_t seqs = 1;
        for (size_t i = 0; i < len && !st; i++) {
            int32_t s = e[i].arg;
            /* a call in last place keeps no frame (a tail call): nothing to win */
            size_t k = e[i].type == PE_RULE && i + 1 < len && s != r && small[s]
                       ? n_alts(&ps->rules[s]) : 0;
            const struct gel *add = e + i;
            size_t n_add = 1;
            if (k == 1) {
                add = alt_of(&ps->rules[s], 0, &n_add);
                inlined = 1;
            }
            if (k <= 1 || seqs * k > INLINE_MAX_OUT) {
                v = run;
                if (!n_add || (st = llm_grow(&v, &cap_run, n_run + n_add, sizeof *run)))
                    continue;
                run = v;
                memcpy(run + n_run, add, n_add * sizeof *run);
                n_run += n_add;
                continue;
            }
            if ((st = append_each(&tmp, &n_tmp, &cap_tmp, seqs, run, n_run)))
                break;
            n_run = 0;
            /* every sequence times every alternative of s */
            struct gel *nt = NULL;
            size_t n_nt = 0, cap_nt = 0, from = 0;
            const struct prule *ps_s = &ps->rules[s];
            for (size_t j = 0; j <= n_tmp && !st; j++) {
                if (j < n_tmp && tmp[j].type != PE_ALT)
                    continue;
                for (size_t b = 0; b < k && !st; b++) {
                    size_t lb;
                    const struct gel *eb = alt_of(ps_s, b, &lb);
                    v = nt;
                    if ((st = llm_grow(&v, &cap_nt, n_nt + (j - from) + lb + 1, sizeof *nt)))
                        break;
                    nt = v;
                    if (n_nt)
                        nt[n_nt++] = (struct gel){ .type = PE_ALT };
                    if (j > from)
                        memcpy(nt + n_nt, tmp + from, (j - from) * sizeof *nt);
                    n_nt += j - from;
                    if (lb)
                        memcpy(nt + n_nt, eb, lb * sizeof *nt);
                    n_nt += lb;
                }
                from = j + 1;
            }
            llm_free(tmp);
            tmp = nt;
            n_tmp = n_nt;
            cap_tmp = cap_nt;
            seqs *= k;
            inlined = 1;
        }
        if (!st)
            st = append_each(&tmp, &n_tmp, &cap_tmp, seqs, run, n_run);
        if (st)
            break;
        void *o = out;
        if ((st = llm_grow(&o, &cap_out, n_out + n_tmp + 1, sizeof *out)))
            break;
        out = o;
        if (a)
            out[n_out++] = (struct gel){ .type = PE_ALT };
        if (n_tmp)
            memcpy(out + n_out, tmp, n_tmp * sizeof *out);
        n_out += n_tmp;
        alts_out += seqs;
    }
    llm_free(tmp);
    llm_free(run);
    if (st || alts_out > INLINE_MAX_OUT || !inlined) { /* too big, or unchanged */
        llm_free(out);
        return st;
    }
    *changed = 1;
    llm_free(pr->body);
    pr->body = out;
    pr->n = n_out;
    pr->cap = cap_out;
    return LLM_OK;
}

/* Inline small rules that cannot reach themselves, into the places where
 * they are called not last; in passes, so that what a pass inlines may be
 * inlined further in the next (hex into a group into char, say). */
static llm_status inline_small(struct parser *ps, int32_t root)
{
    const size_t n = ps->n_rules;
    uint8_t *small = llm_calloc(2 * n + 1, 1);
    if (!small)
        return LLM_E_NOMEM;
    llm_status st = LLM_OK;
    int changed = 1;
    for (int pass = 0; pass < 4 && changed && !st; pass++) {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            const struct prule *r = &ps->rules[i];
            small[i] = (int32_t)i != root && r->n <= INLINE_MAX_EL &&
                       n_alts(r) <= INLINE_MAX_ALT && !recursive(ps, (int32_t)i, small + n);
        }
        for (size_t i = 0; i < n && !st; i++)
            st = inline_into(ps, (int32_t)i, small, &changed);
    }
    llm_free(small);
    return st;
}

static llm_status check(struct parser *ps, struct llm_grammar *g)
{
    for (size_t i = 0; i < ps->n_rules; i++)
        if (!ps->rules[i].defined) {
            char what[300];
            snprintf(what, sizeof what, "undefined rule '%.200s'", ps->rules[i].name);
            return perr(ps, ps->src + ps->rules[i].ref_at, what);
        }
    int32_t root = -1;
    for (size_t i = 0; i < ps->n_rules && root < 0; i++)
        if (strcmp(ps->rules[i].name, "root") == 0)
            root = (int32_t)i;
    if (root < 0)
        return llm_error_set(LLM_E_FORMAT, "%s: no rule named 'root'", ps->name);
    g->root = (uint32_t)root;
    LLM_TRY(inline_small(ps, root));
    LLM_TRY(compile(ps, g));
    uint8_t *nullable = llm_calloc((size_t)g->n_rules + 1, 1);
    if (!nullable)
        return LLM_E_NOMEM;
    find_nullable(g, nullable);
    int32_t c = left_recursive(g, nullable);
    llm_free(nullable);
    if (c == -2)
        return LLM_E_NOMEM;
    if (c >= 0) {
        char buf[256];
        return llm_error_set(LLM_E_FORMAT, "%s: rule '%s' is left-recursive", ps->name,
                             user_name(g, (uint32_t)c, buf, sizeof buf));
    }
    return LLM_OK;
}

llm_status llm_grammar_parse(struct llm_grammar **out, const char *src, size_t len,
                             const char *name)
{
    *out = NULL;
    struct parser ps = { .src = src, .p = src, .end = src + len, .name = name ? name : "grammar" };
    struct llm_grammar *g = llm_calloc(1, sizeof *g);
    if (!g)
        return LLM_E_NOMEM;
    llm_status st = LLM_OK;
    skip_space(&ps, 1);
    while (!st && ps.p < ps.end) {
        st = parse_rule(&ps);
        skip_space(&ps, 1);
    }
    if (!st)
        st = check(&ps, g);
    parser_free(&ps);
    if (st) {
        llm_grammar_free(g);
        return st;
    }
    *out = g;
    return LLM_OK;
}

/* Any JSON value (RFC 8259); the text ends with it (no whitespace after
 * it for a model to loop on). */
const char llm_grammar_json[] = "root ::= \" \"? value\n" GRAM_JSON_RULES;
