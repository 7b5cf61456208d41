/* match.c: running a grammar: interned stacks, the vocabulary walk, token
 * classes per position, masks and their cache (the plan is in grammar.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/num.h"
#include "../tokenizer/tokenizer.h"
#include "gram_impl.h"

/* A stack: the position to match next and the frame below it. Interned:
 * one node per (pos, parent), so a stack is one pointer. */
struct gnode {
    uint32_t pos;               /* an element of g->el */
    uint32_t mark, umark;       /* closure and union stamps (dedup without a set) */
    struct gnode *parent;       /* NULL: the bottom; &ctx_node: unknown (token classes) */
    struct gnode *chain;        /* the intern table's bucket list */
    struct gsucc *succ;         /* the closure after this node's set matched, once known */
};

/* A closure: the terminal stacks (tops at GE_SET) reached, and whether the
 * bottom (the grammar may end) or the unknown rest was reached. */
struct gsucc {
    uint32_t n;
    uint8_t accept, ctx;
    struct gnode *v[];
};

static struct gnode ctx_node;
#define CTX (&ctx_node)

/* Token classes of one position: accepted whatever the stack below, and
 * uncertain (to check against the real stack). The rest is rejected. */
struct gpos {
    uint64_t *acc;              /* (words) */
    int32_t *unc;               /* (n_unc) their places in the sorted vocabulary, in order */
    uint32_t n_unc;
};

/* A cached whole mask. */
struct gcache {
    uint64_t hash;
    struct gnode **key;         /* (n) */
    uint32_t n, cp;
    uint8_t accept, need, ulen;
    uint64_t *bits;
    struct gcache *chain;
};

/* A set of stacks met in a walk, interned: the same set is one id, and
 * its moves on ASCII bytes are remembered, so that walking the vocabulary
 * again and again through the same states costs a table lookup per byte
 * (the subset construction of a DFA, made lazily). */
struct wst {
    struct gnode **v;           /* (n) sorted by address */
    uint32_t n;
    uint8_t accept, ctx;        /* the closure that made it reached the bottom, the unknown rest */
    uint64_t hash;
    int32_t chain;              /* the intern table's bucket list */
    int32_t next[128];          /* the state after each ASCII byte; WS_UNKNOWN: not yet */
};

#define WS_UNKNOWN (-1)

/* The state after some prefix of a token, in a walk. */
struct wdepth {
    int32_t st;                 /* its stacks (a struct wst) */
    uint32_t cp;                /* the unfinished code point so far */
    uint8_t need;               /* continuation bytes still to come */
    uint8_t ulen;               /* of a sequence of ulen bytes */
    uint8_t ctx_seen;           /* the unknown rest was reached at or before here */
    uint8_t end_ok;             /* a token may end here */
};

#define ARENA_CHUNK ((size_t)1 << 20)
#define MASK_CACHE_MAX 4096

struct llm_gmask {
    const struct llm_grammar *g;
    const struct llm_tokenizer *tok;
    /* arena for nodes, closures and masks */
    char *chunk;
    size_t used, size;
    void **chunks;
    size_t n_chunks, cap_chunks;
    /* intern table */
    struct gnode **bucket;
    size_t n_bucket, n_nodes;
    uint32_t epoch, uepoch;
    /* closure scratch */
    struct gnode **scr;
    size_t n_scr, cap_scr;
    uint8_t scr_accept, scr_ctx;
    /* the vocabulary, sorted by bytes (tokens with text only) */
    int32_t n_vocab, words;
    int32_t *sorted;            /* (n_sorted) token ids */
    uint32_t *lcp;              /* (n_sorted) common prefix with the previous one */
    const char **bytes;         /* (n_vocab) */
    uint32_t *len;              /* (n_vocab) */
    uint8_t *eog;               /* (n_vocab) */
    int32_t n_sorted;
    uint32_t max_len;
    /* walks */
    struct wdepth *D;           /* (max_len + 1) */
    struct wst *ws;             /* (n_ws) walk states; 0 is the empty set */
    size_t n_ws, cap_ws;
    int32_t *ws_bucket;         /* (n_ws_bucket) */
    size_t n_ws_bucket;
    struct gnode **wtmp;        /* scratch for a state being made */
    size_t cap_wtmp;
    /* classes per position */
    struct gpos **pos;          /* (g->n_el) */
    int64_t n_positions;
    /* whole masks */
    struct gcache **cache;      /* (n_cache_bucket) */
    size_t n_cache, n_cache_bucket;
    uint64_t *out;              /* (words) the mask last returned */
    const struct llm_gmatch *out_of; /* and whose it was, at which version */
    uint64_t out_ver;
    int32_t *unc_tmp;
    size_t cap_unc;
    /* timing */
    double *times;
    size_t n_times, cap_times;
    int64_t n_cached;
};

struct llm_gmatch {
    struct llm_gmask *m;
    struct gnode **v;           /* (n) its terminal stacks, sorted by address */
    uint32_t n, cap;
    uint32_t cp;
    uint8_t accept, need, ulen;
    uint64_t ver;               /* changes with every token taken */
};

/* ---- arena and interning ---- */

static void *arena(struct llm_gmask *m, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (m->used + n > m->size) {
        size_t sz = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        void *c = llm_malloc(sz), *cs = m->chunks;
        if (!c || llm_grow(&cs, &m->cap_chunks, m->n_chunks + 1, sizeof(void *))) {
            llm_free(c);
            return NULL;
        }
        m->chunks = cs;
        m->chunks[m->n_chunks++] = c;
        m->chunk = c;
        m->used = 0;
        m->size = sz;
    }
    void *p = m->chunk + m->used;
    m->used += n;
    return p;
}

static size_t node_hash(uint32_t pos, const struct gnode *parent, size_t nb)
{
    uint64_t h = (uint64_t)(uintptr_t)parent * 0x9E3779B97F4A7C15ull ^ (uint64_t)pos * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ (h >> 29)) & (nb - 1);
}

static struct gnode *intern(struct llm_gmask *m, uint32_t pos, struct gnode *parent)
{
    size_t h = node_hash(pos, parent, m->n_bucket);
    for (struct gnode *n = m->bucket[h]; n; n = n->chain)
        if (n->pos == pos && n->parent == parent)
            return n;
    if (m->n_nodes + 1 > m->n_bucket) { /* rehash at load 1 */
        size_t nb = m->n_bucket * 2;
        struct gnode **b = llm_calloc(nb, sizeof *b);
        if (!b)
            return NULL;
        for (size_t i = 0; i < m->n_bucket; i++)
            for (struct gnode *n = m->bucket[i], *next; n; n = next) {
                next = n->chain;
                size_t k = node_hash(n->pos, n->parent, nb);
                n->chain = b[k];
                b[k] = n;
            }
        llm_free(m->bucket);
        m->bucket = b;
        m->n_bucket = nb;
        h = node_hash(pos, parent, nb);
    }
    struct gnode *n = arena(m, sizeof *n);
    if (!n)
        return NULL;
    *n = (struct gnode){ .pos = pos, .parent = parent, .chain = m->bucket[h] };
    m->bucket[h] = n;
    m->n_nodes++;
    return n;
}

/* ---- closures ---- */

/* Add to the scratch every terminal stack that node n leads to without
 * consuming a character. Nodes already visited in this closure are
 * skipped, so a grammar with many optional items stays linear. */
#define CLOSURE_MAX_DEPTH 20000 /* rules entered or left without reading a character */

static llm_status closure(struct llm_gmask *m, struct gnode *n, int depth)
{
    if (depth > CLOSURE_MAX_DEPTH)
        return llm_error_set(LLM_E_UNSUPPORTED, "grammar: more than %d rules entered or left "
                             "without reading a character", CLOSURE_MAX_DEPTH);
    if (!n) {
        m->scr_accept = 1;
        return LLM_OK;
    }
    if (n == CTX) {
        m->scr_ctx = 1;
        return LLM_OK;
    }
    if (n->mark == m->epoch)
        return LLM_OK;
    n->mark = m->epoch;
    const struct llm_grammar *g = m->g;
    const struct gel *e = &g->el[n->pos];
    if (e->type == GE_SET) {
        void *s = m->scr;
        LLM_TRY(llm_grow(&s, &m->cap_scr, m->n_scr + 1, sizeof *m->scr));
        m->scr = s;
        m->scr[m->n_scr++] = n;
        return LLM_OK;
    }
    if (e->type == GE_END)
        return closure(m, n->parent, depth + 1);
    /* a rule: its alternatives, returning to the element after it (or,
     * when it is the last element, straight to our caller's frame) */
    struct gnode *ret = n->parent;
    if (g->el[n->pos + 1].type != GE_END && !(ret = intern(m, n->pos + 1, n->parent)))
        return LLM_E_NOMEM;
    const struct grule *r = &g->rules[e->arg];
    for (uint32_t a = 0; a < r->n_alt; a++) {
        struct gnode *s = intern(m, g->alt[r->first_alt + a], ret);
        if (!s)
            return LLM_E_NOMEM;
        LLM_TRY(closure(m, s, depth + 1));
    }
    return LLM_OK;
}

/* The next value of a stamp counter (m->epoch for closures, m->uepoch for
 * unions); when it wraps, every node's stamp of that kind is cleared. */
static void stamp_next(struct llm_gmask *m, uint32_t *epoch)
{
    if (++*epoch)
        return;
    const int of_union = epoch == &m->uepoch;
    for (size_t i = 0; i < m->n_bucket; i++)
        for (struct gnode *n = m->bucket[i]; n; n = n->chain)
            *(of_union ? &n->umark : &n->mark) = 0;
    *epoch = 1;
}

static void closure_begin(struct llm_gmask *m)
{
    stamp_next(m, &m->epoch);
    m->n_scr = 0;
    m->scr_accept = m->scr_ctx = 0;
}

/* The closure after node n's character set has matched (cached on n). */
static struct gsucc *succ(struct llm_gmask *m, struct gnode *n)
{
    if (n->succ)
        return n->succ;
    closure_begin(m);
    struct gnode *next = intern(m, n->pos + 1, n->parent);
    if (!next || closure(m, next, 0))
        return NULL;
    struct gsucc *s = arena(m, sizeof *s + m->n_scr * sizeof(struct gnode *));
    if (!s)
        return NULL;
    s->n = (uint32_t)m->n_scr;
    s->accept = m->scr_accept;
    s->ctx = m->scr_ctx;
    if (m->n_scr)
        memcpy(s->v, m->scr, m->n_scr * sizeof *m->scr);
    return n->succ = s;
}

/* ---- the walk over a token's bytes ---- */

static uint64_t ws_hash(struct gnode *const *v, uint32_t n, uint8_t accept, uint8_t ctx)
{
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)accept << 1 | ctx);
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uintptr_t)v[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* The id of the state of stacks v (n, reordered here) and flags. */
static int32_t ws_intern(struct llm_gmask *m, struct gnode **v, uint32_t n, uint8_t accept,
                         uint8_t ctx)
{
    for (uint32_t i = 1; i < n; i++) /* sets are small: insertion sort */
        for (uint32_t k = i; k > 0 && (uintptr_t)v[k - 1] > (uintptr_t)v[k]; k--) {
            struct gnode *x = v[k];
            v[k] = v[k - 1];
            v[k - 1] = x;
        }
    uint64_t h = ws_hash(v, n, accept, ctx);
    for (int32_t id = m->ws_bucket[h & (m->n_ws_bucket - 1)]; id >= 0; id = m->ws[id].chain) {
        const struct wst *w = &m->ws[id];
        if (w->hash == h && w->n == n && w->accept == accept && w->ctx == ctx &&
            (!n || !memcmp(w->v, v, n * sizeof *v)))
            return id;
    }
    void *p = m->ws;
    if (llm_grow(&p, &m->cap_ws, m->n_ws + 1, sizeof *m->ws))
        return -1;
    m->ws = p;
    struct wst *w = &m->ws[m->n_ws];
    w->v = arena(m, (n ? n : 1) * sizeof *v);
    if (!w->v)
        return -1;
    if (n) /* v may be NULL when n is 0 */
        memcpy(w->v, v, n * sizeof *v);
    w->n = n;
    w->accept = accept;
    w->ctx = ctx;
    w->hash = h;
    for (int b = 0; b < 128; b++)
        w->next[b] = WS_UNKNOWN;
    int32_t id = (int32_t)m->n_ws++;
    if (m->n_ws > m->n_ws_bucket) { /* rehash at load 1 */
        size_t nb = m->n_ws_bucket * 2;
        int32_t *b = llm_malloc(nb * sizeof *b);
        if (!b)
            return -1;
        for (size_t k = 0; k < nb; k++)
            b[k] = -1;
        for (size_t k = 0; k < m->n_ws; k++) {
            m->ws[k].chain = b[m->ws[k].hash & (nb - 1)];
            b[m->ws[k].hash & (nb - 1)] = (int32_t)k;
        }
        llm_free(m->ws_bucket);
        m->ws_bucket = b;
        m->n_ws_bucket = nb;
    } else {
        w->chain = m->ws_bucket[h & (m->n_ws_bucket - 1)];
        m->ws_bucket[h & (m->n_ws_bucket - 1)] = id;
    }
    return id;
}

static llm_status wtmp_room(struct llm_gmask *m, size_t need)
{
    void *b = m->wtmp;
    LLM_TRY(llm_grow(&b, &m->cap_wtmp, need, sizeof *m->wtmp));
    m->wtmp = b;
    return LLM_OK;
}

/* The state after state `from` reads code point cp: the closures of the
 * stacks whose set holds it. */
static int32_t ws_advance(struct llm_gmask *m, int32_t from, uint32_t cp)
{
    const struct llm_grammar *g = m->g;
    uint32_t n = 0;
    uint8_t accept = 0, ctx = 0;
    stamp_next(m, &m->uepoch);
    for (uint32_t i = 0; i < m->ws[from].n; i++) {
        struct gnode *x = m->ws[from].v[i];
        if (!gset_has(g, &g->sets[g->el[x->pos].arg], cp))
            continue;
        struct gsucc *sc = succ(m, x);
        if (!sc || wtmp_room(m, (size_t)n + sc->n))
            return -1;
        accept |= sc->accept;
        ctx |= sc->ctx;
        for (uint32_t k = 0; k < sc->n; k++)
            if (sc->v[k]->umark != m->uepoch) {
                sc->v[k]->umark = m->uepoch;
                m->wtmp[n++] = sc->v[k];
            }
    }
    return ws_intern(m, m->wtmp, n, accept, ctx);
}

/* The stacks of state `from` that some code point in [lo, hi] fits (the
 * bytes of a character read so far allow no other). */
static int32_t ws_filter(struct llm_gmask *m, int32_t from, uint32_t lo, uint32_t hi)
{
    const struct llm_grammar *g = m->g;
    uint32_t n = 0;
    if (wtmp_room(m, m->ws[from].n))
        return -1;
    for (uint32_t i = 0; i < m->ws[from].n; i++) {
        struct gnode *x = m->ws[from].v[i];
        if (gset_meets(g, &g->sets[g->el[x->pos].arg], lo, hi))
            m->wtmp[n++] = x;
    }
    return ws_intern(m, m->wtmp, n, 0, 0);
}

/* D[d+1] from D[d] and byte b. Returns 1 when stacks remain, 0 when none
 * does (D[d+1].end_ok still says whether a token may end there), <0 on an
 * allocation failure. */
static int step(struct llm_gmask *m, struct wdepth *D, uint32_t d, uint8_t b)
{
    const struct wdepth *s = &D[d];
    struct wdepth *t = &D[d + 1];
    *t = (struct wdepth){ .st = 0, .ctx_seen = s->ctx_seen };
    if (s->need == 0 && b < 0x80) {
        int32_t nx = m->ws[s->st].next[b];
        if (nx == WS_UNKNOWN) {
            if ((nx = ws_advance(m, s->st, b)) < 0)
                return -1;
            m->ws[s->st].next[b] = nx;
        }
        t->st = nx;
    } else {
        /* the smallest code point of a sequence of 1-4 bytes (less is overlong) */
        static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
        uint32_t cp;
        uint8_t need, ulen = s->ulen;
        if (s->need == 0) {
            if (b >= 0xC2 && b < 0xE0)
                cp = b & 0x1F, need = 1;
            else if (b >= 0xE0 && b < 0xF0)
                cp = b & 0x0F, need = 2;
            else if (b >= 0xF0 && b < 0xF5)
                cp = b & 0x07, need = 3;
            else
                return 0; /* not UTF-8: the empty state */
            ulen = (uint8_t)(need + 1);
        } else {
            if ((b & 0xC0) != 0x80)
                return 0;
            cp = s->cp << 6 | (b & 0x3F);
            need = (uint8_t)(s->need - 1);
        }
        t->cp = cp;
        t->need = need;
        t->ulen = ulen;
        uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
        if (lo < least[ulen])
            lo = least[ulen];
        if (hi > 0x10FFFF)
            hi = 0x10FFFF;
        if (lo > hi || (need == 0 && cp >= 0xD800 && cp <= 0xDFFF))
            return 0; /* overlong, a surrogate or past U+10FFFF */
        if (need)
            t->st = ws_filter(m, s->st, lo, hi);
        else
            t->st = ws_advance(m, s->st, cp);
        if (t->st < 0)
            return -1;
    }
    const struct wst *w = &m->ws[t->st];
    t->ctx_seen |= w->ctx;
    /* the token may end where the known stack does (ctx), or the grammar */
    t->end_ok = w->n > 0 || (!t->need && (w->accept || w->ctx));
    return w->n > 0;
}

enum { C_REJ, C_ACC, C_UNC };

/* The class of a token that ended at D[d] (or, when it ran on past a dead
 * D[d], of every token with that prefix). */
static int classify(const struct wdepth *D, uint32_t d, int ended)
{
    if (ended && D[d].end_ok)
        return C_ACC;
    return D[d].ctx_seen ? C_UNC : C_REJ;
}

static void set_bit(uint64_t *bits, int32_t t)
{
    bits[t >> 6] |= 1ull << (t & 63);
}

/* The common prefix of the tokens at sorted places a and b. */
static uint32_t lcp_of(const struct llm_gmask *m, int32_t a, int32_t b)
{
    if (b == a + 1)
        return m->lcp[b];
    int32_t x = m->sorted[a], y = m->sorted[b];
    uint32_t k = 0;
    while (k < m->len[x] && k < m->len[y] && m->bytes[x][k] == m->bytes[y][k])
        k++;
    return k;
}

/* Walk the sorted vocabulary (or the subset of it at the sorted places
 * sub, n_sub, in order) from the stacks v (n) with an unfinished code
 * point (cp, need, ulen): accepted tokens into acc, the sorted places of
 * uncertain ones appended to m->unc_tmp (*n_unc). Tokens sharing a prefix
 * share its steps, and a dead prefix skips all of them at once. */
static llm_status walk(struct llm_gmask *m, struct gnode *const *v, uint32_t n, uint32_t cp,
                       uint8_t need, uint8_t ulen, const int32_t *sub, int32_t n_sub,
                       uint64_t *acc, size_t *n_unc)
{
    struct wdepth *D = m->D;
    LLM_TRY(wtmp_room(m, n));
    if (n)
        memcpy(m->wtmp, v, n * sizeof *v);
    D[0] = (struct wdepth){ .st = ws_intern(m, m->wtmp, n, 0, 0), .cp = cp, .need = need,
                            .ulen = ulen };
    if (D[0].st < 0)
        return LLM_E_NOMEM;
    uint32_t valid = 0;
    *n_unc = 0;
    const int32_t total = sub ? n_sub : m->n_sorted;
    for (int32_t k = 0, prev = -1; k < total;) {
        int32_t i = sub ? sub[k] : k, id = m->sorted[i];
        const uint8_t *b = (const uint8_t *)m->bytes[id];
        uint32_t len = m->len[id], lcp = prev < 0 ? 0 : lcp_of(m, prev, i);
        uint32_t d = lcp < valid ? lcp : valid, dead = 0;
        while (d < len) {
            int r = step(m, D, d, b[d]);
            if (r < 0)
                return LLM_E_NOMEM;
            d++;
            if (!r) {
                dead = d;
                break;
            }
        }
        valid = d;
        int c = classify(D, d, d == len);
        for (;;) {
            if (c == C_ACC) {
                set_bit(acc, id);
            } else if (c == C_UNC) {
                void *u = m->unc_tmp;
                LLM_TRY(llm_grow(&u, &m->cap_unc, *n_unc + 1, sizeof *m->unc_tmp));
                m->unc_tmp = u;
                m->unc_tmp[(*n_unc)++] = i;
            }
            prev = i;
            k++;
            /* past a dead prefix, every token that shares it runs on past it */
            if (!dead || k >= total)
                break;
            i = sub ? sub[k] : k;
            if (lcp_of(m, prev, i) < dead)
                break;
            id = m->sorted[i];
            c = classify(D, dead, 0);
        }
    }
    return LLM_OK;
}

/* Follow token id's bytes from the stacks v (n); on success D[len] holds
 * the state after it. Returns 1 when the token fits, 0 when it does not. */
static int follow(struct llm_gmask *m, struct gnode *const *v, uint32_t n, uint32_t cp,
                  uint8_t need, uint8_t ulen, int32_t id)
{
    struct wdepth *D = m->D;
    if (wtmp_room(m, n))
        return -1;
    if (n)
        memcpy(m->wtmp, v, n * sizeof *v);
    D[0] = (struct wdepth){ .st = ws_intern(m, m->wtmp, n, 0, 0), .cp = cp, .need = need,
                            .ulen = ulen };
    if (D[0].st < 0)
        return -1;
    uint32_t len = m->len[id];
    const uint8_t *b = (const uint8_t *)m->bytes[id];
    for (uint32_t d = 0; d < len; d++) {
        int r = step(m, D, d, b[d]);
        if (r < 0)
            return -1;
        if (!r)
            return d + 1 == len && D[len].end_ok;
    }
    return D[len].end_ok;
}

/* ---- token classes per position ---- */

static struct gpos *position(struct llm_gmask *m, uint32_t pos)
{
    if (m->pos[pos])
        return m->pos[pos];
    struct gnode *start = intern(m, pos, CTX);
    uint64_t *acc = arena(m, (size_t)m->words * 8);
    if (!start || !acc)
        return NULL;
    memset(acc, 0, (size_t)m->words * 8);
    size_t n_unc;
    if (walk(m, &start, 1, 0, 0, 0, NULL, 0, acc, &n_unc))
        return NULL;
    struct gpos *p = arena(m, sizeof *p + n_unc * sizeof(int32_t));
    if (!p)
        return NULL;
    p->acc = acc;
    p->unc = (int32_t *)(p + 1);
    p->n_unc = (uint32_t)n_unc;
    if (n_unc) /* unc_tmp may never have been needed */
        memcpy(p->unc, m->unc_tmp, n_unc * sizeof(int32_t));
    m->n_positions++;
    return m->pos[pos] = p;
}

/* ---- the vocabulary ---- */

struct tok_key {
    const char *b;
    uint32_t len;
    int32_t id;
};

static int cmp_tokens(const void *a, const void *b)
{
    const struct tok_key *x = a, *y = b;
    int c = memcmp(x->b, y->b, x->len < y->len ? x->len : y->len);
    if (c)
        return c;
    return x->len != y->len ? (x->len < y->len ? -1 : 1) : (x->id > y->id) - (x->id < y->id);
}

static llm_status index_vocab(struct llm_gmask *m)
{
    const struct llm_tokenizer *t = m->tok;
    m->n_vocab = (int32_t)llm_tokenizer_n_tokens(t);
    m->words = (m->n_vocab + 63) / 64;
    m->bytes = llm_calloc((size_t)m->n_vocab, sizeof *m->bytes);
    m->len = llm_calloc((size_t)m->n_vocab, sizeof *m->len);
    m->eog = llm_calloc((size_t)m->n_vocab, 1);
    m->sorted = llm_malloc((size_t)m->n_vocab * sizeof *m->sorted);
    m->lcp = llm_malloc((size_t)m->n_vocab * sizeof *m->lcp);
    m->out = llm_calloc((size_t)m->words, 8);
    if (!m->bytes || !m->len || !m->eog || !m->sorted || !m->lcp || !m->out)
        return LLM_E_NOMEM;
    for (int32_t id = 0; id < m->n_vocab; id++) {
        const char *b;
        size_t l;
        m->eog[id] = (uint8_t)llm_tokenizer_is_eog(t, id);
        LLM_TRY(llm_token_piece(t, id, 0, &b, &l, NULL));
        m->bytes[id] = b;
        m->len[id] = (uint32_t)l;
        if (l && !m->eog[id]) {
            m->sorted[m->n_sorted++] = id;
            if (l > m->max_len)
                m->max_len = (uint32_t)l;
        }
    }
    struct tok_key *keys = llm_malloc(((size_t)m->n_sorted + 1) * sizeof *keys);
    if (!keys)
        return LLM_E_NOMEM;
    for (int32_t i = 0; i < m->n_sorted; i++)
        keys[i] = (struct tok_key){ m->bytes[m->sorted[i]], m->len[m->sorted[i]], m->sorted[i] };
    qsort(keys, (size_t)m->n_sorted, sizeof *keys, cmp_tokens);
    for (int32_t i = 0; i < m->n_sorted; i++)
        m->sorted[i] = keys[i].id;
    llm_free(keys);
    for (int32_t i = 0; i < m->n_sorted; i++) {
        uint32_t k = 0;
        if (i) {
            int32_t a = m->sorted[i - 1], b = m->sorted[i];
            while (k < m->len[a] && k < m->len[b] && m->bytes[a][k] == m->bytes[b][k])
                k++;
        }
        m->lcp[i] = k;
    }
    return LLM_OK;
}

static llm_status gmask_init(struct llm_gmask *m, const struct llm_grammar *g,
                             const struct llm_tokenizer *tok, uint32_t max_len)
{
    m->g = g;
    m->tok = tok;
    m->n_bucket = 1024;
    m->bucket = llm_calloc(m->n_bucket, sizeof *m->bucket);
    m->pos = llm_calloc(g->n_el, sizeof *m->pos);
    m->n_cache_bucket = 1024;
    m->cache = llm_calloc(m->n_cache_bucket, sizeof *m->cache);
    m->n_ws_bucket = 1024;
    m->ws_bucket = llm_malloc(m->n_ws_bucket * sizeof *m->ws_bucket);
    if (!m->bucket || !m->pos || !m->cache || !m->ws_bucket)
        return LLM_E_NOMEM;
    for (size_t i = 0; i < m->n_ws_bucket; i++)
        m->ws_bucket[i] = -1;
    if (ws_intern(m, NULL, 0, 0, 0) != 0) /* state 0: no stack */
        return LLM_E_NOMEM;
    if (tok)
        LLM_TRY(index_vocab(m));
    if (m->max_len < max_len)
        m->max_len = max_len;
    m->D = llm_malloc(((size_t)m->max_len + 1) * sizeof *m->D);
    return m->D ? LLM_OK : LLM_E_NOMEM;
}

static void gmask_fini(struct llm_gmask *m)
{
    for (size_t i = 0; i < m->n_chunks; i++)
        llm_free(m->chunks[i]);
    llm_free(m->chunks);
    llm_free(m->bucket);
    llm_free(m->scr);
    llm_free(m->bytes);
    llm_free(m->len);
    llm_free(m->eog);
    llm_free(m->sorted);
    llm_free(m->lcp);
    llm_free(m->D);
    llm_free(m->ws);
    llm_free(m->ws_bucket);
    llm_free(m->wtmp);
    llm_free(m->pos);
    for (size_t i = 0; i < m->n_cache_bucket && m->cache; i++)
        for (struct gcache *c = m->cache[i], *next; c; c = next) {
            next = c->chain;
            llm_free(c);
        }
    llm_free(m->cache);
    llm_free(m->out);
    llm_free(m->unc_tmp);
    llm_free(m->times);
}

llm_status llm_gmask_new(struct llm_gmask **out, const struct llm_grammar *g,
                         const struct llm_tokenizer *tok)
{
    *out = NULL;
    struct llm_gmask *m = llm_calloc(1, sizeof *m);
    if (!m)
        return LLM_E_NOMEM;
    llm_status s = gmask_init(m, g, tok, 0);
    /* the token classes of every position a text can reach, now, so that
     * no step waits for them */
    uint8_t *live = s ? NULL : llm_calloc(g->n_rules, 1);
    uint32_t *todo = live ? llm_malloc(g->n_rules * sizeof *todo) : NULL;
    uint32_t n_todo = 0;
    if (!s && !todo)
        s = LLM_E_NOMEM;
    if (!s) {
        live[g->root] = 1;
        todo[n_todo++] = g->root;
    }
    while (!s && n_todo) {
        const struct grule *r = &g->rules[todo[--n_todo]];
        for (uint32_t a = 0; a < r->n_alt && !s; a++)
            for (uint32_t i = g->alt[r->first_alt + a]; g->el[i].type != GE_END && !s; i++) {
                const struct gel *e = &g->el[i];
                if (e->type == GE_SET && !position(m, i))
                    s = LLM_E_NOMEM;
                else if (e->type == GE_RULE && !live[e->arg]) {
                    live[e->arg] = 1;
                    todo[n_todo++] = (uint32_t)e->arg;
                }
            }
    }
    llm_free(live);
    llm_free(todo);
    if (s) {
        gmask_fini(m);
        llm_free(m);
        return s;
    }
    *out = m;
    return LLM_OK;
}

void llm_gmask_free(struct llm_gmask *m)
{
    if (!m)
        return;
    gmask_fini(m);
    llm_free(m);
}

void llm_gmask_stats(const struct llm_gmask *m, struct llm_gmask_stats *st)
{
    memset(st, 0, sizeof *st);
    st->n_masks = (int64_t)m->n_times;
    st->n_cached = m->n_cached;
    st->n_positions = m->n_positions;
    if (!m->n_times)
        return;
    double *t = llm_malloc(m->n_times * sizeof *t);
    if (!t)
        return;
    memcpy(t, m->times, m->n_times * sizeof *t);
    qsort(t, m->n_times, sizeof *t, llm_cmp_double);
    for (size_t i = 0; i < m->n_times; i++)
        st->t_total_s += t[i];
    st->t_median_us = llm_percentile_sorted(t, m->n_times, 50) * 1e6;
    st->t_p99_us = llm_percentile_sorted(t, m->n_times, 99) * 1e6;
    st->t_max_us = t[m->n_times - 1] * 1e6;
    llm_free(t);
}

/* ---- sequences ---- */

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(struct gnode *const *)a, y = (uintptr_t)*(struct gnode *const *)b;
    return (x > y) - (x < y);
}

static llm_status set_state(struct llm_gmatch *s, struct gnode *const *v, uint32_t n,
                            uint8_t accept, uint32_t cp, uint8_t need, uint8_t ulen)
{
    void *p = s->v;
    size_t cap = s->cap;
    LLM_TRY(llm_grow(&p, &cap, n ? n : 1, sizeof *s->v));
    s->v = p;
    s->cap = (uint32_t)cap;
    if (n) /* v may be NULL when n is 0 */
        memmove(s->v, v, n * sizeof *v);
    qsort(s->v, n, sizeof *s->v, cmp_ptr);
    s->n = n;
    s->accept = accept;
    s->cp = cp;
    s->need = need;
    s->ulen = ulen;
    s->ver++;
    return LLM_OK;
}

llm_status llm_gmatch_new(struct llm_gmatch **out, struct llm_gmask *m)
{
    *out = NULL;
    struct llm_gmatch *s = llm_calloc(1, sizeof *s);
    if (!s)
        return LLM_E_NOMEM;
    s->m = m;
    const struct llm_grammar *g = m->g;
    const struct grule *r = &g->rules[g->root];
    closure_begin(m);
    llm_status st = LLM_OK;
    for (uint32_t a = 0; a < r->n_alt && !st; a++) {
        struct gnode *n = intern(m, g->alt[r->first_alt + a], NULL);
        st = n ? closure(m, n, 0) : LLM_E_NOMEM;
    }
    if (!st)
        st = set_state(s, m->scr, (uint32_t)m->n_scr, m->scr_accept, 0, 0, 0);
    if (st) {
        llm_gmatch_free(s);
        return st;
    }
    *out = s;
    return LLM_OK;
}

llm_status llm_gmatch_copy(struct llm_gmatch **out, const struct llm_gmatch *src)
{
    *out = NULL;
    struct llm_gmatch *s = llm_calloc(1, sizeof *s);
    if (!s)
        return LLM_E_NOMEM;
    s->m = src->m;
    llm_status st = set_state(s, src->v, src->n, src->accept, src->cp, src->need,
                               src->ulen);
    if (st) {
        llm_gmatch_free(s);
        return st;
    }
    *out = s;
    return LLM_OK;
}

void llm_gmatch_free(struct llm_gmatch *s)
{
    if (!s)
        return;
    if (s->m->out_of == s) /* a later sequence at this address is another */
        s->m->out_of = NULL;
    llm_free(s->v);
    llm_free(s);
}

int llm_gmatch_can_end(const struct llm_gmatch *s)
{
    return s->accept && !s->need;
}

int llm_gmatch_must_end(const struct llm_gmatch *s)
{
    return s->n == 0 && s->accept && !s->need;
}

static uint64_t state_hash(const struct llm_gmatch *s)
{
    uint64_t h = 0x84222325cbf29ce4ull ^ ((uint64_t)s->accept << 40) ^ ((uint64_t)s->ulen << 36) ^
                 ((uint64_t)s->need << 32) ^ s->cp;
    for (uint32_t i = 0; i < s->n; i++)
        h = (h ^ (uint64_t)(uintptr_t)s->v[i]) * 0x100000001b3ull;
    return h ^ (h >> 31);
}

static struct gcache *cache_find(struct llm_gmask *m, const struct llm_gmatch *s, uint64_t h)
{
    for (struct gcache *c = m->cache[h & (m->n_cache_bucket - 1)]; c; c = c->chain)
        if (c->hash == h && c->n == s->n && c->accept == s->accept && c->need == s->need && c->ulen == s->ulen &&
            c->cp == s->cp && memcmp(c->key, s->v, s->n * sizeof *s->v) == 0)
            return c;
    return NULL;
}

static void cache_put(struct llm_gmask *m, const struct llm_gmatch *s, uint64_t h,
                      const uint64_t *bits)
{
    if (m->n_cache >= MASK_CACHE_MAX)
        return;
    struct gcache *c = llm_malloc(sizeof *c + s->n * sizeof *s->v + (size_t)m->words * 8);
    if (!c)
        return; /* a cache, not a need */
    c->hash = h;
    c->bits = (uint64_t *)(c + 1);
    c->key = (struct gnode **)(c->bits + m->words);
    c->n = s->n;
    c->accept = s->accept;
    c->need = s->need;
    c->ulen = s->ulen;
    c->cp = s->cp;
    memcpy(c->bits, bits, (size_t)m->words * 8);
    memcpy(c->key, s->v, s->n * sizeof *s->v);
    c->chain = m->cache[h & (m->n_cache_bucket - 1)];
    m->cache[h & (m->n_cache_bucket - 1)] = c;
    m->n_cache++;
}

/* The mask of state s, into m->out. */
static llm_status make_mask(struct llm_gmatch *s)
{
    struct llm_gmask *m = s->m;
    uint64_t *bits = m->out;
    memset(bits, 0, (size_t)m->words * 8);
    if (s->need) { /* inside a character: walk the vocabulary from here */
        size_t n_unc;
        LLM_TRY(walk(m, s->v, s->n, s->cp, s->need, s->ulen, NULL, 0, bits, &n_unc));
    } else {
        for (uint32_t i = 0; i < s->n; i++) {
            struct gpos *p = position(m, s->v[i]->pos);
            if (!p)
                return LLM_E_NOMEM;
            for (int32_t w = 0; w < m->words; w++)
                bits[w] |= p->acc[w];
        }
        /* the uncertain tokens of each stack, against the stack itself */
        for (uint32_t i = 0; i < s->n; i++) {
            struct gpos *p = m->pos[s->v[i]->pos];
            size_t n_unc;
            if (p->n_unc)
                LLM_TRY(walk(m, &s->v[i], 1, 0, 0, 0, p->unc, (int32_t)p->n_unc, bits, &n_unc));
        }
    }
    if (llm_gmatch_can_end(s))
        for (int32_t id = 0; id < m->n_vocab; id++)
            if (m->eog[id])
                set_bit(bits, id);
    return LLM_OK;
}


llm_status llm_gmatch_allowed(struct llm_gmatch *s, const uint64_t **bits, int32_t *n_allowed,
                              int32_t *only)
{
    struct llm_gmask *m = s->m;
    if (!m->tok)
        return llm_error_set(LLM_E_INVALID, "grammar: no vocabulary to make masks from");
    if (m->out_of == s && m->out_ver == s->ver) /* asked again, nothing taken since */
        goto count;
    double t0 = llm_now_s();
    uint64_t h = state_hash(s);
    struct gcache *c = cache_find(m, s, h);
    if (c) {
        memcpy(m->out, c->bits, (size_t)m->words * 8);
        m->n_cached++;
    } else {
        LLM_TRY(make_mask(s));
        cache_put(m, s, h, m->out);
    }
    m->out_of = s;
    m->out_ver = s->ver;
    void *tp = m->times;
    if (!llm_grow(&tp, &m->cap_times, m->n_times + 1, sizeof *m->times)) {
        m->times = tp;
        m->times[m->n_times++] = llm_now_s() - t0;
    }
count:;
    int32_t count = 0, one = -1;
    for (int32_t w = 0; w < m->words; w++)
        if (m->out[w]) {
            int k = __builtin_popcountll(m->out[w]);
            if (!count && k == 1)
                one = w * 64 + __builtin_ctzll(m->out[w]);
            count += k;
        }
    *bits = m->out;
    *n_allowed = count;
    *only = count == 1 ? one : -1;
    return LLM_OK;
}

llm_status llm_gmatch_apply(struct llm_gmatch *s, float *logits, int32_t *n_allowed,
                            int32_t *only)
{
    const uint64_t *bits;
    LLM_TRY(llm_gmatch_allowed(s, &bits, n_allowed, only));
    for (int32_t w = 0; w < s->m->words; w++) {
        uint64_t keep = bits[w];
        if (keep == ~0ull)
            continue;
        int32_t end = (w + 1) * 64 < s->m->n_vocab ? (w + 1) * 64 : s->m->n_vocab;
        for (int32_t t = w * 64; t < end; t++)
            if (!((keep >> (t & 63)) & 1))
                logits[t] = -INFINITY;
    }
    return LLM_OK;
}

llm_status llm_gmatch_accept(struct llm_gmatch *s, int32_t id)
{
    struct llm_gmask *m = s->m;
    if (id < 0 || id >= m->n_vocab)
        return llm_error_set(LLM_E_INVALID, "grammar: token %d out of range", id);
    if (m->eog[id] || !m->len[id]) {
        if (m->eog[id] && llm_gmatch_can_end(s))
            return set_state(s, NULL, 0, 1, 0, 0, 0);
        return llm_error_set(LLM_E_INVALID, "grammar: token %d cannot come here", id);
    }
    int r = follow(m, s->v, s->n, s->cp, s->need, s->ulen, id);
    if (r < 0)
        return LLM_E_NOMEM;
    if (!r)
        return llm_error_set(LLM_E_INVALID, "grammar: token %d cannot come here", id);
    const struct wdepth *e = &m->D[m->len[id]];
    const struct wst *w = &m->ws[e->st];
    return set_state(s, w->v, w->n, w->accept, e->cp, e->need, e->ulen);
}

/* ---- whole strings ---- */

int llm_grammar_accepts(const struct llm_grammar *g, const char *str, size_t len)
{
    struct llm_gmask m = { 0 };
    struct llm_gmatch *s = NULL;
    int ok = 0;
    if (len > UINT32_MAX - 1 || gmask_init(&m, g, NULL, (uint32_t)len) ||
        llm_gmatch_new(&s, &m))
        goto done;
    /* follow() reads a token's bytes; make the string token 0 */
    const char *bytes[1] = { str };
    uint32_t lens[1] = { (uint32_t)len };
    m.bytes = bytes;
    m.len = lens;
    m.n_vocab = 1;
    int r = len ? follow(&m, s->v, s->n, 0, 0, 0, 0) : 1;
    ok = r == 1 && (len ? m.ws[m.D[len].st].accept && !m.D[len].need : s->accept);
    m.bytes = NULL;
    m.len = NULL;
done:
    llm_gmatch_free(s);
    gmask_fini(&m);
    return ok;
}
