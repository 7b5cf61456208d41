/* meta.c: the metadata tree, its YAML reader and writer (libyaml) and a JSON
 * writer. */
#include "meta.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../common/alloc.h"
#include "../common/io.h"

#define MAX_DEPTH 64

/* ------------------------------------------------------------------------ */
/* nodes */

struct llm_meta *llm_meta_new(enum llm_meta_kind kind)
{
    struct llm_meta *m = llm_calloc(1, sizeof *m);
    if (m)
        m->kind = kind;
    return m;
}

void llm_meta_free(struct llm_meta *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        llm_meta_free(m->items[i]);
    llm_free(m->items);
    llm_free(m->index);
    llm_free(m->key);
    llm_free(m->s);
    llm_free(m);
}

struct llm_meta *llm_meta_clone(const struct llm_meta *m)
{
    struct llm_meta *c = llm_meta_new(m->kind);
    if (!c)
        return NULL;
    c->i = m->i;
    c->f = m->f;
    c->f32 = m->f32;
    c->line = m->line;
    if ((m->key && !(c->key = llm_strdup(m->key))) ||
        (m->s && !(c->s = llm_strndup(m->s, m->slen))))
        goto fail;
    c->slen = m->slen;
    for (size_t i = 0; i < m->n; i++) {
        struct llm_meta *ci = llm_meta_clone(m->items[i]);
        if (!ci || llm_meta_push(c, ci) != LLM_OK)
            goto fail;
    }
    return c;
fail:
    llm_meta_free(c);
    return NULL;
}

struct llm_meta *llm_meta_new_i64(int64_t v)
{
    struct llm_meta *m = llm_meta_new(LLM_META_INT);
    if (m)
        m->i = v;
    return m;
}

struct llm_meta *llm_meta_new_f64(double v)
{
    struct llm_meta *m = llm_meta_new(LLM_META_FLOAT);
    if (m)
        m->f = v;
    return m;
}

struct llm_meta *llm_meta_new_f32(float v)
{
    struct llm_meta *m = llm_meta_new_f64((double)v);
    if (m)
        m->f32 = 1;
    return m;
}

struct llm_meta *llm_meta_new_bool(int v)
{
    struct llm_meta *m = llm_meta_new(LLM_META_BOOL);
    if (m)
        m->i = v != 0;
    return m;
}

struct llm_meta *llm_meta_new_strn(const char *s, size_t n)
{
    struct llm_meta *m = llm_meta_new(LLM_META_STR);
    if (m && !(m->s = llm_strndup(s, n))) {
        llm_free(m);
        return NULL;
    }
    if (m)
        m->slen = n;
    return m;
}

/* ---- the key index of a map ----
 * Maps of up to INDEX_MIN keys are scanned; larger ones keep an
 * open-addressed table of their items, rebuilt at twice the size when it
 * gets half full. Without it a map of n keys took O(n^2) to read (each key
 * is looked up once for duplicates), 30 s for 100,000 keys. */
#define INDEX_MIN 16

static size_t key_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (size_t)(h ^ (h >> 32));
}

static void index_insert(struct llm_meta *m, size_t i)
{
    size_t mask = m->index_cap - 1, k = key_hash(m->items[i]->key) & mask;
    while (m->index[k])
        k = (k + 1) & mask;
    m->index[k] = (uint32_t)(i + 1);
}

/* (Re)build the index for the current items; without memory for it the
 * map is scanned instead, which is slower but right. */
static void index_rebuild(struct llm_meta *m)
{
    llm_free(m->index);
    m->index = NULL;
    m->index_cap = 0;
    if (m->kind != LLM_META_MAP || m->n < INDEX_MIN || m->n >= UINT32_MAX / 4)
        return;
    size_t cap = 64;
    while (cap < 4 * m->n)
        cap *= 2;
    if (!(m->index = llm_calloc(cap, sizeof *m->index)))
        return;
    m->index_cap = cap;
    for (size_t i = 0; i < m->n; i++)
        index_insert(m, i);
}

/* The position of `key` in a map, or SIZE_MAX. */
static size_t find_key(const struct llm_meta *m, const char *key)
{
    if (m->index_cap) {
        size_t mask = m->index_cap - 1;
        for (size_t k = key_hash(key) & mask; m->index[k]; k = (k + 1) & mask)
            if (strcmp(m->items[m->index[k] - 1]->key, key) == 0)
                return m->index[k] - 1;
        return SIZE_MAX;
    }
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->items[i]->key, key) == 0)
            return i;
    return SIZE_MAX;
}

llm_status llm_meta_push(struct llm_meta *seq, struct llm_meta *node)
{
    llm_status s = llm_grow((void **)&seq->items, &seq->cap, seq->n + 1, sizeof *seq->items);
    if (s) {
        llm_meta_free(node);
        return s;
    }
    seq->items[seq->n++] = node;
    if (seq->kind == LLM_META_MAP && node->key) {
        if (seq->index_cap && 2 * seq->n <= seq->index_cap)
            index_insert(seq, seq->n - 1);
        else if (seq->n >= INDEX_MIN)
            index_rebuild(seq);
    }
    return LLM_OK;
}

struct llm_meta *llm_meta_child(const struct llm_meta *map, const char *key)
{
    if (!map || map->kind != LLM_META_MAP)
        return NULL;
    size_t i = find_key(map, key);
    return i == SIZE_MAX ? NULL : map->items[i];
}

llm_status llm_meta_put(struct llm_meta *map, const char *key, struct llm_meta *node)
{
    if (!node)
        return LLM_E_NOMEM;
    if (map->kind != LLM_META_MAP) {
        llm_meta_free(node);
        return llm_error_set(LLM_E_INVALID, "metadata: '%s' set on a non-map", key);
    }
    llm_free(node->key);
    node->key = llm_strdup(key);
    if (!node->key) {
        llm_meta_free(node);
        return LLM_E_NOMEM;
    }
    size_t i = find_key(map, key);
    if (i != SIZE_MAX) { /* the same key at the same place: the index holds */
        llm_meta_free(map->items[i]);
        map->items[i] = node;
        return LLM_OK;
    }
    return llm_meta_push(map, node);
}

/* Walk a dotted path; with `create`, make missing maps. Returns the parent
 * map of the last component and points *last at that component. */
static struct llm_meta *walk(struct llm_meta *root, const char *path, int create, char *last,
                             size_t lastsz)
{
    struct llm_meta *cur = root;
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n == 0 || n >= lastsz)
            return NULL;
        memcpy(last, p, n);
        last[n] = 0;
        if (!dot)
            return cur;
        struct llm_meta *next = llm_meta_child(cur, last);
        if (!next) {
            if (!create)
                return NULL;
            next = llm_meta_new(LLM_META_MAP);
            if (!next || llm_meta_put(cur, last, next) != LLM_OK)
                return NULL;
        }
        if (next->kind != LLM_META_MAP)
            return NULL;
        cur = next;
        p = dot + 1;
    }
}

struct llm_meta *llm_meta_get(const struct llm_meta *root, const char *path)
{
    char last[256];
    struct llm_meta *parent = walk((struct llm_meta *)root, path, 0, last, sizeof last);
    return parent ? llm_meta_child(parent, last) : NULL;
}

llm_status llm_meta_set(struct llm_meta *root, const char *path, struct llm_meta *node)
{
    char last[256];
    if (!node)
        return LLM_E_NOMEM;
    struct llm_meta *parent = walk(root, path, 1, last, sizeof last);
    if (!parent) {
        llm_meta_free(node);
        return llm_error_set(LLM_E_INVALID, "metadata: cannot set '%s'", path);
    }
    return llm_meta_put(parent, last, node);
}

void llm_meta_del(struct llm_meta *root, const char *path)
{
    char last[256];
    struct llm_meta *parent = walk(root, path, 0, last, sizeof last);
    if (!parent)
        return;
    size_t i = find_key(parent, last);
    if (i == SIZE_MAX)
        return;
    llm_meta_free(parent->items[i]);
    memmove(parent->items + i, parent->items + i + 1, (parent->n - i - 1) * sizeof *parent->items);
    parent->n--;
    if (parent->index_cap) /* the items after i moved: rare enough to rebuild */
        index_rebuild(parent);
}

llm_status llm_meta_set_i64(struct llm_meta *r, const char *p, int64_t v)
{
    return llm_meta_set(r, p, llm_meta_new_i64(v));
}
llm_status llm_meta_set_f64(struct llm_meta *r, const char *p, double v)
{
    return llm_meta_set(r, p, llm_meta_new_f64(v));
}
llm_status llm_meta_set_f32(struct llm_meta *r, const char *p, float v)
{
    return llm_meta_set(r, p, llm_meta_new_f32(v));
}
llm_status llm_meta_set_bool(struct llm_meta *r, const char *p, int v)
{
    return llm_meta_set(r, p, llm_meta_new_bool(v));
}
llm_status llm_meta_set_strn(struct llm_meta *r, const char *p, const char *v, size_t n)
{
    return llm_meta_set(r, p, llm_meta_new_strn(v, n));
}
llm_status llm_meta_set_str(struct llm_meta *r, const char *p, const char *v)
{
    return llm_meta_set_strn(r, p, v, strlen(v));
}

static const char *kind_name(enum llm_meta_kind k)
{
    static const char *names[] = { "null", "bool", "integer", "number", "string", "list", "map" };
    return names[k];
}

static llm_status wrong(const struct llm_meta *m, const char *path, const char *want)
{
    if (m->line)
        return llm_error_set(LLM_E_FORMAT, "line %zu: '%s' is a %s, expected %s", m->line, path,
                             kind_name(m->kind), want);
    return llm_error_set(LLM_E_FORMAT, "'%s' is a %s, expected %s", path, kind_name(m->kind), want);
}

llm_status llm_meta_get_i64(const struct llm_meta *root, const char *path, int64_t *out)
{
    const struct llm_meta *m = llm_meta_get(root, path);
    if (!m)
        return LLM_E_NOTFOUND;
    if (m->kind != LLM_META_INT)
        return wrong(m, path, "an integer");
    *out = m->i;
    return LLM_OK;
}

llm_status llm_meta_get_f64(const struct llm_meta *root, const char *path, double *out)
{
    const struct llm_meta *m = llm_meta_get(root, path);
    if (!m)
        return LLM_E_NOTFOUND;
    if (m->kind == LLM_META_INT)
        *out = (double)m->i;
    else if (m->kind == LLM_META_FLOAT)
        *out = m->f;
    else
        return wrong(m, path, "a number");
    return LLM_OK;
}

llm_status llm_meta_get_bool(const struct llm_meta *root, const char *path, int *out)
{
    const struct llm_meta *m = llm_meta_get(root, path);
    if (!m)
        return LLM_E_NOTFOUND;
    if (m->kind != LLM_META_BOOL)
        return wrong(m, path, "true or false");
    *out = (int)m->i;
    return LLM_OK;
}

llm_status llm_meta_get_str(const struct llm_meta *root, const char *path, const char **out)
{
    const struct llm_meta *m = llm_meta_get(root, path);
    if (!m)
        return LLM_E_NOTFOUND;
    if (m->kind != LLM_META_STR)
        return wrong(m, path, "a string");
    *out = m->s;
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* scalars: YAML 1.2 core schema resolution and shortest float printing */

static int all_digits(const char *s, const char *set)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!strchr(set, *s))
            return 0;
    return 1;
}

/* Resolve a plain scalar to null/bool/int/float, else string. */
static struct llm_meta *resolve_plain(const char *v, size_t n)
{
    if (strlen(v) != n) /* an embedded NUL: only a string can hold it */
        return llm_meta_new_strn(v, n);
    if (n == 0 || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL"))
        return llm_meta_new(LLM_META_NULL);
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "TRUE"))
        return llm_meta_new_bool(1);
    if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "FALSE"))
        return llm_meta_new_bool(0);
    const char *d = (*v == '-' || *v == '+') ? v + 1 : v;
    int base = 0;
    if (all_digits(d, "0123456789"))
        base = 10;
    else if (d == v && !strncmp(v, "0x", 2) && all_digits(v + 2, "0123456789abcdefABCDEF"))
        base = 16;
    else if (d == v && !strncmp(v, "0o", 2) && all_digits(v + 2, "01234567"))
        base = 8;
    if (base) {
        errno = 0;
        char *end;
        long long x;
        if (base == 10) {
            x = strtoll(v, &end, 10);
        } else {
            unsigned long long u = strtoull(v + 2, &end, base);
            if (u > INT64_MAX)
                errno = ERANGE;
            x = (long long)u;
        }
        if (errno == 0 && *end == 0)
            return llm_meta_new_i64(x);
        return llm_meta_new_strn(v, n); /* out of range: keep the text */
    }
    if (!strcmp(d, ".inf") || !strcmp(d, ".Inf") || !strcmp(d, ".INF"))
        return llm_meta_new_f64(*v == '-' ? -INFINITY : INFINITY);
    if (!strcmp(v, ".nan") || !strcmp(v, ".NaN") || !strcmp(v, ".NAN"))
        return llm_meta_new_f64(NAN);
    /* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
    const char *p = d;
    int digits = 0;
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++, digits++;
    }
    if (digits && (*p == 'e' || *p == 'E')) {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return llm_meta_new_strn(v, n);
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (digits && *p == 0)
        return llm_meta_new_f64(strtod(v, NULL));
    return llm_meta_new_strn(v, n);
}

/* Shortest text that reads back as the same value (float32 when f32). */
static void format_float(char *buf, size_t n, double v, int f32)
{
    if (isnan(v)) {
        snprintf(buf, n, ".nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v < 0 ? "-.inf" : ".inf");
        return;
    }
    for (int prec = f32 ? 6 : 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        double back = strtod(buf, NULL);
        if (f32 ? (float)back == (float)v : back == v)
            break;
    }
    /* make sure it does not read back as an integer */
    if (!strpbrk(buf, ".eEn"))
        strncat(buf, ".0", n - strlen(buf) - 1);
}

/* Would this string, written plain, read back as something else? */
static int needs_quotes(const char *s, size_t n)
{
    struct llm_meta *m = resolve_plain(s, n);
    int q = !m || m->kind != LLM_META_STR;
    llm_meta_free(m);
    return q;
}

static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07;
        } else
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const unsigned char *s, size_t n, size_t *outlen)
{
    char *o = llm_malloc((n + 2) / 3 * 4 + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        o[k++] = b64[v >> 18 & 63];
        o[k++] = b64[v >> 12 & 63];
        o[k++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        o[k++] = i + 2 < n ? b64[v & 63] : '=';
    }
    o[k] = 0;
    *outlen = k;
    return o;
}

static struct llm_meta *unbase64(const char *s, size_t n)
{
    char *o = llm_malloc(n / 4 * 3 + 3);
    if (!o)
        return NULL;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = s[i] ? strchr(b64, s[i]) : NULL;
        if (!p)
            continue; /* '=', newlines and spaces */
        acc = acc << 6 | (uint32_t)(p - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (char)(acc >> bits & 0xff);
        }
    }
    struct llm_meta *m = llm_meta_new_strn(o, k);
    llm_free(o);
    return m;
}

/* ------------------------------------------------------------------------ */
/* YAML parsing */

struct parse {
    yaml_parser_t p;
    const char *name;
};

static llm_status perr(struct parse *ps, size_t line, const char *what)
{
    return llm_error_set(LLM_E_FORMAT, "%s:%zu: %s", ps->name, line, what);
}

static llm_status parse_node(struct parse *ps, yaml_event_t *ev, struct llm_meta **out, int depth);

static llm_status next_event(struct parse *ps, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&ps->p, ev)) {
        size_t line = ps->p.problem_mark.line + 1;
        return llm_error_set(LLM_E_FORMAT, "%s:%zu: YAML error: %s%s%s", ps->name, line,
                             ps->p.problem ? ps->p.problem : "unknown",
                             ps->p.context ? " " : "", ps->p.context ? ps->p.context : "");
    }
    return LLM_OK;
}

static llm_status parse_container(struct parse *ps, struct llm_meta *c, int is_map, int depth)
{
    for (;;) {
        yaml_event_t ev;
        LLM_TRY(next_event(ps, &ev));
        if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return LLM_OK;
        }
        char *key = NULL;
        size_t keyline = ev.start_mark.line + 1;
        if (is_map) {
            if (ev.type != YAML_SCALAR_EVENT) {
                yaml_event_delete(&ev);
                return perr(ps, keyline, "map keys must be plain strings");
            }
            key = llm_strndup((const char *)ev.data.scalar.value, ev.data.scalar.length);
            int nul = strlen(key) != ev.data.scalar.length;
            yaml_event_delete(&ev);
            if (!key)
                return LLM_E_NOMEM;
            if (nul) {
                llm_free(key);
                return perr(ps, keyline, "a map key contains a NUL byte");
            }
            if (llm_meta_child(c, key)) {
                llm_status s = llm_error_set(LLM_E_FORMAT, "%s:%zu: duplicate key '%s'", ps->name,
                                             keyline, key);
                llm_free(key);
                return s;
            }
            llm_status s = next_event(ps, &ev);
            if (s) {
                llm_free(key);
                return s;
            }
        }
        struct llm_meta *child = NULL;
        llm_status s = parse_node(ps, &ev, &child, depth + 1);
        yaml_event_delete(&ev);
        if (s) {
            llm_free(key);
            return s;
        }
        s = is_map ? llm_meta_put(c, key, child) : llm_meta_push(c, child);
        llm_free(key);
        if (s)
            return s;
    }
}

static llm_status parse_node(struct parse *ps, yaml_event_t *ev, struct llm_meta **out, int depth)
{
    size_t line = ev->start_mark.line + 1;
    if (depth > MAX_DEPTH)
        return perr(ps, line, "nesting too deep");
    struct llm_meta *m = NULL;
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        return perr(ps, line, "YAML aliases are not supported");
    case YAML_SCALAR_EVENT: {
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        const char *tag = (const char *)ev->data.scalar.tag;
        if (tag && !strcmp(tag, "tag:yaml.org,2002:binary"))
            m = unbase64(v, n);
        else if (tag && !strcmp(tag, "tag:yaml.org,2002:str"))
            m = llm_meta_new_strn(v, n);
        else if (ev->data.scalar.plain_implicit && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
            m = resolve_plain(v, n);
        else
            m = llm_meta_new_strn(v, n);
        if (!m)
            return LLM_E_NOMEM;
        break;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int is_map = ev->type == YAML_MAPPING_START_EVENT;
        m = llm_meta_new(is_map ? LLM_META_MAP : LLM_META_SEQ);
        if (!m)
            return LLM_E_NOMEM;
        m->line = line;
        llm_status s = parse_container(ps, m, is_map, depth);
        if (s) {
            llm_meta_free(m);
            return s;
        }
        break;
    }
    default:
        return perr(ps, line, "unexpected YAML event");
    }
    m->line = line;
    *out = m;
    return LLM_OK;
}

llm_status llm_meta_parse_yaml(struct llm_meta **out, const char *text, size_t len,
                               const char *name)
{
    struct parse ps = { .name = name };
    struct llm_meta *root = NULL;
    llm_status s = LLM_OK;
    yaml_event_t ev;
    if (!yaml_parser_initialize(&ps.p))
        return llm_error_set(LLM_E_NOMEM, "%s: cannot start the YAML parser", name);
    yaml_parser_set_input_string(&ps.p, (const unsigned char *)text, len);
    /* STREAM-START, DOCUMENT-START, root node, DOCUMENT-END, STREAM-END */
    if ((s = next_event(&ps, &ev)))
        goto out;
    yaml_event_delete(&ev);
    if ((s = next_event(&ps, &ev)))
        goto out;
    if (ev.type == YAML_STREAM_END_EVENT) { /* empty document: an empty map */
        yaml_event_delete(&ev);
        root = llm_meta_new(LLM_META_MAP);
        s = root ? LLM_OK : LLM_E_NOMEM;
        goto out;
    }
    yaml_event_delete(&ev);
    if ((s = next_event(&ps, &ev)))
        goto out;
    s = parse_node(&ps, &ev, &root, 0);
    yaml_event_delete(&ev);
    if (s)
        goto out;
    if (root->kind != LLM_META_MAP) {
        s = perr(&ps, 1, "the document is not a map");
        goto out;
    }
    if ((s = next_event(&ps, &ev)))
        goto out;
    yaml_event_delete(&ev);
    if ((s = next_event(&ps, &ev)))
        goto out;
    if (ev.type != YAML_STREAM_END_EVENT)
        s = perr(&ps, ev.start_mark.line + 1, "more than one YAML document");
    yaml_event_delete(&ev);
out:
    yaml_parser_delete(&ps.p);
    if (s) {
        llm_meta_free(root);
        return s;
    }
    *out = root;
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* YAML emitting */

struct sink {
    char *buf;
    size_t n, cap;
    int oom;
};

static int sink_write(void *data, unsigned char *p, size_t n)
{
    struct sink *k = data;
    if (llm_grow((void **)&k->buf, &k->cap, k->n + n + 1, 1)) {
        k->oom = 1;
        return 0;
    }
    memcpy(k->buf + k->n, p, n);
    k->n += n;
    return 1;
}

static llm_status emit(yaml_emitter_t *e, yaml_event_t *ev)
{
    if (!yaml_emitter_emit(e, ev))
        return llm_error_set(LLM_E_INVALID, "metadata: cannot write YAML: %s",
                             e->problem ? e->problem : "unknown error");
    return LLM_OK;
}

static llm_status emit_scalar(yaml_emitter_t *e, const char *tag, const char *v, size_t n,
                              yaml_scalar_style_t style, int plain_ok)
{
    yaml_event_t ev;
    if (n > INT32_MAX)
        return llm_error_set(LLM_E_INVALID, "metadata: string too long");
    if (!yaml_scalar_event_initialize(&ev, NULL, (yaml_char_t *)tag, (yaml_char_t *)v, (int)n,
                                      plain_ok, !tag, style))
        return LLM_E_NOMEM;
    return emit(e, &ev);
}

static llm_status emit_str(yaml_emitter_t *e, const char *s, size_t n)
{
    if (!valid_utf8((const unsigned char *)s, n) || memchr(s, 0, n)) {
        size_t bn;
        char *b = base64((const unsigned char *)s, n, &bn);
        if (!b)
            return LLM_E_NOMEM;
        llm_status st = emit_scalar(e, "tag:yaml.org,2002:binary", b, bn, YAML_ANY_SCALAR_STYLE, 0);
        llm_free(b);
        return st;
    }
    int multiline = memchr(s, '\n', n) != NULL;
    yaml_scalar_style_t style = multiline ? YAML_LITERAL_SCALAR_STYLE
                                : needs_quotes(s, n) ? YAML_DOUBLE_QUOTED_SCALAR_STYLE
                                                     : YAML_ANY_SCALAR_STYLE;
    return emit_scalar(e, NULL, s, n, style, style == YAML_ANY_SCALAR_STYLE);
}

static llm_status emit_node(yaml_emitter_t *e, const struct llm_meta *m)
{
    char buf[64];
    yaml_event_t ev;
    switch (m->kind) {
    case LLM_META_NULL:
        return emit_scalar(e, NULL, "null", 4, YAML_PLAIN_SCALAR_STYLE, 1);
    case LLM_META_BOOL:
        return emit_scalar(e, NULL, m->i ? "true" : "false", m->i ? 4 : 5, YAML_PLAIN_SCALAR_STYLE, 1);
    case LLM_META_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)m->i);
        return emit_scalar(e, NULL, buf, strlen(buf), YAML_PLAIN_SCALAR_STYLE, 1);
    case LLM_META_FLOAT:
        format_float(buf, sizeof buf, m->f, m->f32);
        return emit_scalar(e, NULL, buf, strlen(buf), YAML_PLAIN_SCALAR_STYLE, 1);
    case LLM_META_STR:
        return emit_str(e, m->s, m->slen);
    case LLM_META_SEQ:
    case LLM_META_MAP: {
        int is_map = m->kind == LLM_META_MAP;
        /* short lists of scalars read best on one line */
        int flow = !is_map && m->n <= 16;
        for (size_t i = 0; flow && i < m->n; i++)
            if (m->items[i]->kind >= LLM_META_STR)
                flow = 0;
        if (is_map)
            yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        else
            yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                 flow ? YAML_FLOW_SEQUENCE_STYLE
                                                      : YAML_BLOCK_SEQUENCE_STYLE);
        LLM_TRY(emit(e, &ev));
        for (size_t i = 0; i < m->n; i++) {
            if (is_map)
                LLM_TRY(emit_str(e, m->items[i]->key, strlen(m->items[i]->key)));
            LLM_TRY(emit_node(e, m->items[i]));
        }
        if (is_map)
            yaml_mapping_end_event_initialize(&ev);
        else
            yaml_sequence_end_event_initialize(&ev);
        return emit(e, &ev);
    }
    }
    return LLM_E_INVALID;
}

llm_status llm_meta_emit_yaml(const struct llm_meta *root, char **out, size_t *len)
{
    yaml_emitter_t e;
    yaml_event_t ev;
    struct sink k = { 0 };
    llm_status s = LLM_OK;
    if (!yaml_emitter_initialize(&e))
        return LLM_E_NOMEM;
    yaml_emitter_set_output(&e, sink_write, &k);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, 100);
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    if ((s = emit(&e, &ev)))
        goto out;
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    if ((s = emit(&e, &ev)))
        goto out;
    if ((s = emit_node(&e, root)))
        goto out;
    yaml_document_end_event_initialize(&ev, 1);
    if ((s = emit(&e, &ev)))
        goto out;
    yaml_stream_end_event_initialize(&ev);
    if ((s = emit(&e, &ev)))
        goto out;
    if (!yaml_emitter_flush(&e))
        s = llm_error_set(LLM_E_NOMEM, "metadata: cannot write YAML");
out:
    yaml_emitter_delete(&e);
    if (!s && k.oom)
        s = LLM_E_NOMEM;
    if (s) {
        llm_free(k.buf);
        return s;
    }
    if (!k.buf && (s = llm_grow((void **)&k.buf, &k.cap, 1, 1)))
        return s;
    k.buf[k.n] = 0;
    *out = k.buf;
    *len = k.n;
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* JSON */

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, cp = c & 0x07;
    else
        return 0;
    if (k > n)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k;
}

void llm_json_string(FILE *f, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(u + i, n - i);
        if (!k) {
            fputs("\\ufffd", f);
            i++;
            continue;
        }
        if (k > 1) {
            fwrite(u + i, 1, k, f);
            i += k;
            continue;
        }
        unsigned char c = u[i++];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20 || c == 0x7f)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
        }
    }
    fputc('"', f);
}


static void json_indent(FILE *f, int indent)
{
    if (indent < 0)
        return;
    fputc('\n', f);
    for (int i = 0; i < indent; i++)
        fputs("  ", f);
}

llm_status llm_meta_write_json(const struct llm_meta *m, FILE *f, int indent)
{
    char buf[64];
    switch (m->kind) {
    case LLM_META_NULL: fputs("null", f); break;
    case LLM_META_BOOL: fputs(m->i ? "true" : "false", f); break;
    case LLM_META_INT: fprintf(f, "%lld", (long long)m->i); break;
    case LLM_META_FLOAT:
        if (!isfinite(m->f)) {
            fputs("null", f);
            break;
        }
        format_float(buf, sizeof buf, m->f, m->f32);
        fputs(buf, f);
        break;
    case LLM_META_STR: llm_json_string(f, m->s, m->slen); break;
    case LLM_META_SEQ:
    case LLM_META_MAP: {
        int is_map = m->kind == LLM_META_MAP;
        fputc(is_map ? '{' : '[', f);
        for (size_t i = 0; i < m->n; i++) {
            if (i)
                fputc(',', f);
            json_indent(f, indent >= 0 ? indent + 1 : -1);
            if (is_map) {
                llm_json_string(f, m->items[i]->key, strlen(m->items[i]->key));
                fputs(indent >= 0 ? ": " : ":", f);
            }
            llm_meta_write_json(m->items[i], f, indent >= 0 ? indent + 1 : -1);
        }
        if (m->n)
            json_indent(f, indent);
        fputc(is_map ? '}' : ']', f);
        break;
    }
    }
    return llm_stream_status(f);
}
