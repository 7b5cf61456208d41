/* schema.c: a JSON Schema turned into GBNF whose texts are JSON documents
 * that validate against it.
 *
 * What is enforced: type (one or a list), properties, required,
 * additionalProperties, items, prefixItems, minItems, maxItems, enum,
 * const, anyOf, oneOf (as anyOf: a value that fits two branches is not
 * refused), local $ref to "#", "#/$defs/..." and "#/definitions/...",
 * minLength, maxLength, pattern, format (date, time, date-time, uuid) and
 * integer bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum).
 * Annotations (title, description, default, examples, $schema, $id,
 * $comment, readOnly, writeOnly, deprecated) change nothing. Any other
 * keyword is refused by name with its place in the schema, never ignored.
 *
 * Where the schema leaves a choice, the grammar takes the narrower one,
 * as OpenAI's strict mode does: properties come in the order the schema
 * lists them; an object without additionalProperties has no others; an
 * array with prefixItems and no items has no more items, and has all of
 * its prefix items. Every text of the grammar still validates.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "convert.h"
#include "gram_impl.h"

#define SCHEMA_MAX_DEPTH 64

struct sref {
    char *ref;
    char rule[32];
};

struct sc {
    const char *name;
    json_t *root;
    struct gtext out;           /* the rules made so far */
    int n_rules;
    struct sref *refs;
    size_t n_refs, cap_refs;
    int depth;
};

static llm_status conv(struct sc *c, json_t *s, const char *path, char rule[32]);

static llm_status refuse(struct sc *c, const char *path, const char *what)
{
    return llm_error_set(LLM_E_UNSUPPORTED, "%s: %s: %s", c->name, path, what);
}

static llm_status bad(struct sc *c, const char *path, const char *what)
{
    return llm_error_set(LLM_E_FORMAT, "%s: %s: %s", c->name, path, what);
}

static void child(char *buf, size_t n, const char *path, const char *key)
{
    snprintf(buf, n, "%s/%s", path, key);
}

static void child_i(char *buf, size_t n, const char *path, const char *key, size_t i)
{
    snprintf(buf, n, "%s/%s/%zu", path, key, i);
}

/* A JSON value written compactly, as a GBNF literal. */
static llm_status literal(struct sc *c, struct gtext *t, json_t *v, const char *path)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return bad(c, path, "a value that cannot be written as JSON");
    GT_LIT(t, "\"");
    const char *p = s, *end = s + strlen(s);
    while (p < end) {
        uint32_t cp;
        unsigned char lead = (unsigned char)*p++;
        if (gram_utf8(lead, &p, end, &cp)) /* jansson writes UTF-8: not expected */
            cp = 0xFFFD;
        llm_gtext_cp(t, cp, 0);
    }
    GT_LIT(t, "\"");
    free(s); /* jansson's allocation */
    return LLM_OK;
}

/* A new rule name, and the rule's text appended to the output. */
static void new_name(struct sc *c, char rule[32])
{
    snprintf(rule, 32, "s%d", c->n_rules++);
}

static void emit_rule(struct sc *c, const char *rule, const struct gtext *body)
{
    llm_gtext_printf(&c->out, "%s ::= ", rule);
    llm_gtext_put(&c->out, body->s ? body->s : "\"\"", body->s ? body->len : 2);
    GT_LIT(&c->out, "\n");
}

/* ---- integers ---- */

/* Digit strings a <= b of the same length n: the numbers between. */
static void digits_range(struct gtext *t, const char *a, const char *b, int n)
{
    if (n == 0) {
        GT_LIT(t, "\"\"");
        return;
    }
    if (a[0] == b[0]) {
        llm_gtext_printf(t, "\"%c\" ", a[0]);
        digits_range(t, a + 1, b + 1, n - 1);
        return;
    }
    int low = 1, high = 1;
    for (int i = 1; i < n; i++)
        low &= a[i] == '0', high &= b[i] == '9';
    if (low && high) {
        llm_gtext_printf(t, "[%c-%c]", a[0], b[0]);
        if (n > 1)
            llm_gtext_printf(t, " [0-9]{%d}", n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    llm_gtext_printf(t, "( \"%c\" (", a[0]);
    digits_range(t, a + 1, nines, n - 1);
    GT_LIT(t, ")");
    if (a[0] + 1 <= b[0] - 1) {
        llm_gtext_printf(t, " | [%c-%c]", a[0] + 1, b[0] - 1);
        if (n > 1)
            llm_gtext_printf(t, " [0-9]{%d}", n - 1);
    }
    llm_gtext_printf(t, " | \"%c\" (", b[0]);
    digits_range(t, zeros, b + 1, n - 1);
    GT_LIT(t, ") )");
}

/* Non-negative integers in [lo, hi]; hi < 0: no upper bound (up to 16
 * digits, as the JSON rules allow). */
static void uint_range(struct gtext *t, long long lo, long long hi)
{
    char a[24], b[24];
    int first = 1;
    GT_LIT(t, "(");
    for (int n = 1; n <= 16; n++) {
        long long top = 1;
        for (int i = 0; i < n; i++)
            top *= 10;
        long long from = n == 1 ? 0 : top / 10, to = top - 1;
        if (from < lo)
            from = lo;
        if (hi >= 0 && to > hi)
            to = hi;
        if (from > to)
            continue;
        llm_gtext_put(t, first ? " " : " | ", first ? 1 : 3);
        first = 0;
        snprintf(a, sizeof a, "%0*lld", n, from);
        snprintf(b, sizeof b, "%0*lld", n, to);
        GT_LIT(t, "(");
        digits_range(t, a, b, n);
        GT_LIT(t, ")");
    }
    if (first)
        GT_LIT(t, " [^\\x00-\\U0010FFFF]"); /* empty */
    GT_LIT(t, " )");
}

static int bound(json_t *s, const char *key, double *v)
{
    json_t *x = json_object_get(s, key);
    if (!x || !json_is_number(x))
        return 0;
    *v = json_number_value(x);
    return 1;
}

static llm_status integer(struct sc *c, json_t *s, const char *path, struct gtext *t)
{
    const double lim = 1e15;
    double v;
    long long lo = -(long long)lim, hi = (long long)lim;
    int has_lo = 0, has_hi = 0;
    if (bound(s, "minimum", &v))
        has_lo = 1, lo = (long long)ceil(v);
    if (bound(s, "exclusiveMinimum", &v) && (!has_lo || (long long)floor(v) + 1 > lo))
        has_lo = 1, lo = (long long)floor(v) + 1;
    if (bound(s, "maximum", &v))
        has_hi = 1, hi = (long long)floor(v);
    if (bound(s, "exclusiveMaximum", &v) && (!has_hi || (long long)ceil(v) - 1 < hi))
        has_hi = 1, hi = (long long)ceil(v) - 1;
    if (!has_lo && !has_hi) {
        GT_LIT(t, "int");
        return LLM_OK;
    }
    if ((has_lo && fabs((double)lo) > lim) || (has_hi && fabs((double)hi) > lim))
        return refuse(c, path, "integer bounds beyond 10^15 cannot be enforced");
    if (has_lo && has_hi && lo > hi)
        return bad(c, path, "no integer lies between minimum and maximum");
    int any = 0;
    GT_LIT(t, "(");
    if (!has_lo || lo < 0) { /* the negative ones: -m for m in [max(1, -hi), -lo] */
        GT_LIT(t, " \"-\" ");
        uint_range(t, has_hi && hi < 0 ? -hi : 1, has_lo ? -lo : -1);
        any = 1;
    }
    if (!has_hi || hi >= 0) {
        llm_gtext_put(t, any ? " | " : " ", any ? 3 : 1);
        uint_range(t, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    GT_LIT(t, " )");
    return LLM_OK;
}

/* ---- strings ---- */

static const struct {
    const char *name, *gbnf;
} formats[] = {
    { "date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )" },
    { "time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
              "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )" },
    { "date-time", NULL }, /* date "T" time */
    { "uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
              "[0-9a-fA-F]{12}" },
};

static llm_status string(struct sc *c, json_t *s, const char *path, struct gtext *t)
{
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    char p2[512];
    if ((fmt != NULL) + (pat != NULL) + (mn || mx) > 1)
        return refuse(c, path, "more than one of format, pattern and minLength/maxLength on one "
                      "string cannot be enforced");
    if (fmt) {
        if (!json_is_string(fmt))
            return bad(c, path, "'format' is not a string");
        const char *f = json_string_value(fmt);
        for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
            if (strcmp(f, formats[i].name))
                continue;
            if (formats[i].gbnf)
                llm_gtext_printf(t, "\"\\\"\" %s \"\\\"\"", formats[i].gbnf);
            else
                llm_gtext_printf(t, "\"\\\"\" %s \"T\" %s \"\\\"\"", formats[0].gbnf, formats[1].gbnf);
            return LLM_OK;
        }
        char what[300];
        snprintf(what, sizeof what, "format '%.200s' cannot be enforced (date, time, date-time "
                 "and uuid can)", f);
        return refuse(c, path, what);
    }
    if (pat) {
        if (!json_is_string(pat))
            return bad(c, path, "'pattern' is not a string");
        const char *re = json_string_value(pat);
        size_t n = json_string_length(pat);
        /* a pattern is searched for, not matched whole, unless anchored */
        int head = n && re[0] == '^';
        int tail = n && re[n - 1] == '$' && !(n >= 2 && re[n - 2] == '\\');
        snprintf(p2, sizeof p2, "%s: %s/pattern", c->name, path);
        GT_LIT(t, "\"\\\"\" ");
        if (!head)
            GT_LIT(t, "char* ");
        LLM_TRY(llm_regex_gbnf_expr(t, re, n, p2, 1));
        if (!tail)
            GT_LIT(t, " char*");
        GT_LIT(t, " \"\\\"\"");
        return LLM_OK;
    }
    if (mn || mx) {
        if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx)))
            return bad(c, path, "minLength and maxLength are integers");
        long long lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
        if (lo < 0 || (mx && hi < lo))
            return bad(c, path, "minLength and maxLength out of order or negative");
        if (lo > 10000 || hi > 10000)
            return refuse(c, path, "string lengths above 10000 cannot be enforced");
        if (hi < 0)
            llm_gtext_printf(t, "\"\\\"\" char{%lld,} \"\\\"\"", lo);
        else
            llm_gtext_printf(t, "\"\\\"\" char{%lld,%lld} \"\\\"\"", lo, hi);
        return LLM_OK;
    }
    GT_LIT(t, "string");
    return LLM_OK;
}

/* ---- objects and arrays ---- */

static int is_required(json_t *req, const char *key)
{
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v)
        if (json_is_string(v) && !strcmp(json_string_value(v), key))
            return 1;
    return 0;
}

static llm_status object(struct sc *c, json_t *s, const char *path, struct gtext *t)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    char p2[512];
    if (props && !json_is_object(props))
        return bad(c, path, "'properties' is not an object");
    if (req && !json_is_array(req))
        return bad(c, path, "'required' is not an array");
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v))
            return bad(c, path, "'required' holds a non-string");
        if (!props || !json_object_get(props, json_string_value(v))) {
            char what[300];
            snprintf(what, sizeof what, "required property '%.200s' is not in properties",
                     json_string_value(v));
            return refuse(c, path, what);
        }
    }
    /* the members, in order: kv[i] is "key" ws ":" ws value ws */
    size_t n = props ? json_object_size(props) : 0;
    char (*kv)[32] = llm_calloc(n + 1, 32);
    uint8_t *opt = llm_calloc(n + 1, 1);
    if (!kv || !opt) {
        llm_free(kv);
        llm_free(opt);
        return LLM_E_NOMEM;
    }
    llm_status st = LLM_OK;
    const char *key;
    size_t k = 0;
    json_object_foreach(props, key, v) {
        char vr[32];
        struct gtext b = { 0 };
        child(p2, sizeof p2, path, "properties");
        snprintf(p2 + strlen(p2), sizeof p2 - strlen(p2), "/%s", key);
        json_t *ks = json_string(key);
        st = ks ? literal(c, &b, ks, p2) : LLM_E_NOMEM;
        json_decref(ks);
        if (!st)
            st = conv(c, v, p2, vr);
        if (st) {
            llm_free(b.s);
            break;
        }
        llm_gtext_printf(&b, " ws \":\" ws %s ws", vr);
        new_name(c, kv[k]);
        emit_rule(c, kv[k], &b);
        llm_free(b.s);
        opt[k] = !is_required(req, key);
        k++;
    }
    /* other members: none, any, or of one schema */
    char extra[32] = "";
    if (!st && add && !json_is_false(add)) {
        char vr[32] = "value";
        child(p2, sizeof p2, path, "additionalProperties");
        if (!json_is_true(add))
            st = conv(c, add, p2, vr);
        if (!st) {
            struct gtext b = { 0 };
            llm_gtext_printf(&b, "string ws \":\" ws %s ws", vr);
            new_name(c, extra);
            emit_rule(c, extra, &b);
            llm_free(b.s);
        }
    } else if (!st && add && !json_is_boolean(add) && !json_is_object(add)) {
        st = bad(c, path, "'additionalProperties' is not a schema");
    }
    if (st) {
        llm_free(kv);
        llm_free(opt);
        return st;
    }
    /* first[i]: members i.. when none came before; more[i]: when some did
     * (each then starts with a comma) */
    char first[32], more[32], nfirst[32] = "", nmore[32] = "";
    for (size_t j = n + 1; j-- > 0;) {
        struct gtext f = { 0 }, m = { 0 };
        if (j == n) {
            if (*extra) {
                llm_gtext_printf(&f, "( %s ( \",\" ws %s )* )?", extra, extra);
                llm_gtext_printf(&m, "( \",\" ws %s )*", extra);
            } else {
                GT_LIT(&f, "\"\"");
                GT_LIT(&m, "\"\"");
            }
        } else {
            llm_gtext_printf(&f, "%s %s", kv[j], nmore);
            llm_gtext_printf(&m, "\",\" ws %s %s", kv[j], nmore);
            if (opt[j]) {
                llm_gtext_printf(&f, " | %s", nfirst);
                llm_gtext_printf(&m, " | %s", nmore);
            }
        }
        new_name(c, first);
        new_name(c, more);
        emit_rule(c, first, &f);
        emit_rule(c, more, &m);
        llm_free(f.s);
        llm_free(m.s);
        memcpy(nfirst, first, 32);
        memcpy(nmore, more, 32);
    }
    llm_gtext_printf(t, "\"{\" ws %s \"}\"", nfirst);
    llm_free(kv);
    llm_free(opt);
    return LLM_OK;
}

static llm_status count(struct sc *c, json_t *s, const char *key, const char *path, long long *v)
{
    json_t *x = json_object_get(s, key);
    if (!x)
        return LLM_OK;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return bad(c, path, "minItems and maxItems are integers of at least 0");
    *v = json_integer_value(x);
    if (*v > 10000)
        return refuse(c, path, "item counts above 10000 cannot be enforced");
    return LLM_OK;
}

static llm_status array(struct sc *c, json_t *s, const char *path, struct gtext *t)
{
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    char p2[512], ir[32] = "value";
    long long mn = 0, mx = -1;
    LLM_TRY(count(c, s, "minItems", path, &mn));
    LLM_TRY(count(c, s, "maxItems", path, &mx));
    if (mx >= 0 && mx < mn)
        return bad(c, path, "maxItems below minItems");
    if (prefix && !json_is_array(prefix))
        return bad(c, path, "'prefixItems' is not an array");
    size_t np = prefix ? json_array_size(prefix) : 0;
    if (mx >= 0 && (size_t)mx < np)
        return refuse(c, path, "maxItems below the number of prefixItems cannot be enforced");
    int more = items ? !json_is_false(items) : !prefix; /* items after the prefix? */
    if (items && !json_is_boolean(items) && !json_is_object(items))
        return bad(c, path, "'items' is not a schema");
    if (more && items && json_is_object(items)) {
        child(p2, sizeof p2, path, "items");
        LLM_TRY(conv(c, items, p2, ir));
    }
    GT_LIT(t, "\"[\" ws");
    for (size_t i = 0; i < np; i++) {
        char pr[32];
        child_i(p2, sizeof p2, path, "prefixItems", i);
        LLM_TRY(conv(c, json_array_get(prefix, i), p2, pr));
        llm_gtext_printf(t, "%s %s ws", i ? " \",\" ws" : "", pr);
    }
    long long lo = mn > (long long)np ? mn - (long long)np : 0, hi = mx < 0 ? -1 : mx - (long long)np;
    if (!more) {
        if (lo > 0)
            return refuse(c, path, "minItems beyond prefixItems with no items cannot be met");
    } else if (np) { /* lo..hi more items, each after a comma */
        if (hi < 0)
            llm_gtext_printf(t, " ( \",\" ws %s ws ){%lld,}", ir, lo);
        else if (hi > 0)
            llm_gtext_printf(t, " ( \",\" ws %s ws ){%lld,%lld}", ir, lo, hi);
    } else if (hi != 0) {
        const char *close = lo == 0 ? " )?" : "";
        llm_gtext_printf(t, " %s%s ws ( \",\" ws %s ws )", lo == 0 ? "( " : "", ir, ir);
        if (hi < 0)
            llm_gtext_printf(t, "{%lld,}%s", lo ? lo - 1 : 0, close);
        else
            llm_gtext_printf(t, "{%lld,%lld}%s", lo ? lo - 1 : 0, hi - 1, close);
    }
    GT_LIT(t, " \"]\"");
    return LLM_OK;
}

/* ---- schemas ---- */

static const char *const annotations[] = { "title", "description", "default", "examples",
                                           "$schema", "$id", "$comment", "readOnly", "writeOnly",
                                           "deprecated", "$defs", "definitions", NULL };
static const char *const handled[] = { "type", "properties", "required", "additionalProperties",
                                       "items", "prefixItems", "minItems", "maxItems", "enum",
                                       "const", "anyOf", "oneOf", "$ref", "minLength", "maxLength",
                                       "pattern", "format", "minimum", "maximum",
                                       "exclusiveMinimum", "exclusiveMaximum", NULL };

static int in(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (!strcmp(*list, k))
            return 1;
    return 0;
}

/* The schema of a value of one JSON type. */
static llm_status typed(struct sc *c, json_t *s, const char *type, const char *path,
                        struct gtext *t)
{
    if (!strcmp(type, "string"))
        return string(c, s, path, t);
    if (!strcmp(type, "integer"))
        return integer(c, s, path, t);
    if (!strcmp(type, "number")) {
        double v;
        if (bound(s, "minimum", &v) || bound(s, "maximum", &v) ||
            bound(s, "exclusiveMinimum", &v) || bound(s, "exclusiveMaximum", &v))
            return refuse(c, path, "bounds on a number (not an integer) cannot be enforced");
        GT_LIT(t, "number");
        return LLM_OK;
    }
    if (!strcmp(type, "boolean")) {
        GT_LIT(t, "( \"true\" | \"false\" )");
        return LLM_OK;
    }
    if (!strcmp(type, "null")) {
        GT_LIT(t, "\"null\"");
        return LLM_OK;
    }
    if (!strcmp(type, "object"))
        return object(c, s, path, t);
    if (!strcmp(type, "array"))
        return array(c, s, path, t);
    char what[300];
    snprintf(what, sizeof what, "unknown type '%.200s'", type);
    return bad(c, path, what);
}

static int type_fits(json_t *v, const char *type)
{
    return !strcmp(type, "string") ? json_is_string(v) : !strcmp(type, "integer") ? json_is_integer(v)
           : !strcmp(type, "number") ? json_is_number(v) : !strcmp(type, "boolean") ? json_is_boolean(v)
           : !strcmp(type, "null") ? json_is_null(v) : !strcmp(type, "object") ? json_is_object(v)
           : !strcmp(type, "array") ? json_is_array(v) : 0;
}

static int fits_types(json_t *v, json_t *type)
{
    if (!type)
        return 1;
    if (json_is_string(type))
        return type_fits(v, json_string_value(type));
    size_t i;
    json_t *x;
    json_array_foreach(type, i, x)
        if (json_is_string(x) && type_fits(v, json_string_value(x)))
            return 1;
    return 0;
}

static llm_status ref(struct sc *c, json_t *r, const char *path, char rule[32])
{
    if (!json_is_string(r))
        return bad(c, path, "'$ref' is not a string");
    const char *u = json_string_value(r);
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, u)) {
            memcpy(rule, c->refs[i].rule, 32);
            return LLM_OK;
        }
    json_t *target = NULL;
    const char *name = NULL;
    if (!strcmp(u, "#"))
        target = c->root;
    else if (!strncmp(u, "#/$defs/", 8))
        name = u + 8, target = json_object_get(json_object_get(c->root, "$defs"), name);
    else if (!strncmp(u, "#/definitions/", 14))
        name = u + 14, target = json_object_get(json_object_get(c->root, "definitions"), name);
    else
        return refuse(c, path, "'$ref' other than '#', '#/$defs/NAME' or '#/definitions/NAME' "
                      "cannot be followed");
    if (!target || (name && strchr(name, '/')))
        return bad(c, path, "'$ref' names no definition of this schema");
    void *p = c->refs;
    LLM_TRY(llm_grow(&p, &c->cap_refs, c->n_refs + 1, sizeof *c->refs));
    c->refs = p;
    struct sref *e = &c->refs[c->n_refs];
    if (!(e->ref = llm_strdup(u)))
        return LLM_E_NOMEM;
    new_name(c, e->rule);
    c->n_refs++;
    memcpy(rule, e->rule, 32);
    /* the rule is named before it is made, so that a definition may refer
     * to itself */
    char sub[32];
    char p2[512];
    snprintf(p2, sizeof p2, "%s", u);
    LLM_TRY(conv(c, target, p2, sub));
    struct gtext b = { 0 };
    llm_gtext_put(&b, sub, strlen(sub));
    emit_rule(c, rule, &b);
    llm_free(b.s);
    return LLM_OK;
}

static llm_status alternatives(struct sc *c, json_t *list, const char *key, const char *path,
                               struct gtext *t)
{
    char p2[512];
    if (!json_is_array(list) || !json_array_size(list)) {
        char what[64];
        snprintf(what, sizeof what, "'%s' is not a non-empty array", key);
        return bad(c, path, what);
    }
    size_t i;
    json_t *v;
    GT_LIT(t, "(");
    json_array_foreach(list, i, v) {
        char r[32];
        child_i(p2, sizeof p2, path, key, i);
        LLM_TRY(conv(c, v, p2, r));
        llm_gtext_printf(t, "%s%s", i ? " | " : " ", r);
    }
    GT_LIT(t, " )");
    return LLM_OK;
}

static llm_status conv_body(struct sc *c, json_t *s, const char *path, struct gtext *t)
{
    if (json_is_true(s)) {
        GT_LIT(t, "value");
        return LLM_OK;
    }
    if (json_is_false(s))
        return refuse(c, path, "the schema false allows no value");
    if (!json_is_object(s))
        return bad(c, path, "a schema is an object or a boolean");
    const char *key;
    json_t *v;
    int n_valid = 0; /* keywords that constrain */
    json_object_foreach(s, key, v) {
        if (in(annotations, key))
            continue;
        if (!in(handled, key)) {
            char what[300];
            snprintf(what, sizeof what, "'%.200s' cannot be enforced", key);
            return refuse(c, path, what);
        }
        n_valid++;
    }
    json_t *type = json_object_get(s, "type");
    if (type && !json_is_string(type) && !json_is_array(type))
        return bad(c, path, "'type' is not a string or an array");
    const char *alone[] = { "$ref", "anyOf", "oneOf", "enum", "const" };
    for (size_t i = 0; i < sizeof alone / sizeof *alone; i++) {
        json_t *x = json_object_get(s, alone[i]);
        if (!x)
            continue;
        int others = n_valid - 1 - (type && i >= 3); /* enum and const may keep their type */
        if (others > 0) {
            char what[128];
            snprintf(what, sizeof what, "'%s' beside other constraints cannot be enforced",
                     alone[i]);
            return refuse(c, path, what);
        }
        if (i == 0) {
            char r[32];
            LLM_TRY(ref(c, x, path, r));
            llm_gtext_put(t, r, strlen(r));
            return LLM_OK;
        }
        if (i <= 2)
            return alternatives(c, x, alone[i], path, t);
        if (i == 4)
            return literal(c, t, x, path);
        if (!json_is_array(x) || !json_array_size(x))
            return bad(c, path, "'enum' is not a non-empty array");
        size_t k, n = 0;
        json_t *e;
        GT_LIT(t, "(");
        json_array_foreach(x, k, e) {
            if (!fits_types(e, type))
                continue;
            llm_gtext_put(t, n ? " | " : " ", n ? 3 : 1);
            n++;
            LLM_TRY(literal(c, t, e, path));
        }
        if (!n)
            return bad(c, path, "no value of 'enum' has the schema's type");
        GT_LIT(t, " )");
        return LLM_OK;
    }
    if (!type) { /* the type the keywords imply, or any value */
        if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
            json_object_get(s, "required"))
            return typed(c, s, "object", path, t);
        if (json_object_get(s, "items") || json_object_get(s, "prefixItems") ||
            json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
            return typed(c, s, "array", path, t);
        if (json_object_get(s, "pattern") || json_object_get(s, "format") ||
            json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return typed(c, s, "string", path, t);
        if (n_valid)
            return refuse(c, path, "numeric bounds without a type cannot be enforced");
        GT_LIT(t, "value");
        return LLM_OK;
    }
    if (json_is_string(type))
        return typed(c, s, json_string_value(type), path, t);
    size_t i;
    json_t *x;
    if (!json_array_size(type))
        return bad(c, path, "'type' is an empty array");
    GT_LIT(t, "(");
    json_array_foreach(type, i, x) {
        if (!json_is_string(x))
            return bad(c, path, "'type' holds a non-string");
        llm_gtext_put(t, i ? " | " : " ", i ? 3 : 1);
        LLM_TRY(typed(c, s, json_string_value(x), path, t));
    }
    GT_LIT(t, " )");
    return LLM_OK;
}

/* A rule for schema s; its name into rule. */
static llm_status conv(struct sc *c, json_t *s, const char *path, char rule[32])
{
    if (++c->depth > SCHEMA_MAX_DEPTH)
        return refuse(c, path, "schemas nested more than 64 deep");
    struct gtext b = { 0 };
    llm_status st = conv_body(c, s, path, &b);
    c->depth--;
    if (!st && b.err)
        st = LLM_E_NOMEM;
    if (!st) {
        new_name(c, rule);
        emit_rule(c, rule, &b);
    }
    llm_free(b.s);
    return st;
}

llm_status llm_schema_to_gbnf(const char *json, size_t len, const char *name, char **gbnf)
{
    *gbnf = NULL;
    json_error_t err;
    struct sc c = { .name = name };
    c.root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!c.root)
        return llm_error_set(LLM_E_FORMAT, "%s:%d:%d: not JSON: %s", name, err.line, err.column,
                             err.text);
    char r[32];
    llm_status st = conv(&c, c.root, "#", r);
    if (!st) {
        llm_gtext_printf(&c.out, "root ::= \" \"? %s\n", r);
        llm_gtext_put(&c.out, GRAM_JSON_RULES, strlen(GRAM_JSON_RULES));
        if (c.out.err)
            st = LLM_E_NOMEM;
    }
    json_decref(c.root);
    for (size_t i = 0; i < c.n_refs; i++)
        llm_free(c.refs[i].ref);
    llm_free(c.refs);
    if (st) {
        llm_free(c.out.s);
        return st;
    }
    *gbnf = c.out.s;
    return LLM_OK;
}
