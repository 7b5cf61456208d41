/* recipe.c: quantization specs and YAML recipes (see quantize.h).
 *
 * A recipe:
 *
 *     default:                 # optional, over the command line's options
 *       method: gptq
 *     rules:                   # first match wins
 *       - match: output.weight
 *         method: rtn
 *         bits: 8
 *       - match: "blk.*.attn_*"
 *         bits: 4
 *         group: 64
 *
 * It is read with libyaml's document API rather than meta.c because the
 * error messages need each node's line.
 */
#include "quantize.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "../common/alloc.h"
#include "../quant/grid.h"
#include "../quant/kquants.h"

static const char *const method_names[] = { "keep", "rtn", "gptq", "awq", "nf4", "fp8" };

const char *llm_qmethod_name(enum llm_qmethod m)
{
    return (unsigned)m < sizeof method_names / sizeof method_names[0] ? method_names[m] : "?";
}

llm_status llm_qmethod_parse(const char *s, enum llm_qmethod *out)
{
    for (size_t i = 0; i < sizeof method_names / sizeof method_names[0]; i++)
        if (!strcasecmp(s, method_names[i])) {
            *out = (enum llm_qmethod)i;
            return LLM_OK;
        }
    return llm_error_set(LLM_E_INVALID, "unknown method '%s' (keep, rtn, gptq, awq, nf4, fp8)", s);
}

static const char *const mix_names[] = { "none",   "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m",
                                         "q6_k",   "q3_k_s", "q3_k_m", "q3_k_l" };

const char *llm_qmix_name(enum llm_qmix m)
{
    return (unsigned)m < sizeof mix_names / sizeof mix_names[0] ? mix_names[m] : "?";
}

llm_status llm_qmix_parse(const char *s, enum llm_qmix *out)
{
    for (size_t i = 1; i < sizeof mix_names / sizeof mix_names[0]; i++)
        if (!strcasecmp(s, mix_names[i])) {
            *out = (enum llm_qmix)i;
            return LLM_OK;
        }
    return llm_error_set(LLM_E_INVALID, "unknown mixture '%s' (q3_k_s, q3_k_m, q3_k_l, q4_k_s, "
                         "q4_k_m, q5_k_s, q5_k_m, q6_k)", s);
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third one between */
static int more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

enum llm_type llm_qmix_type(enum llm_qmix m, const char *name, int layer, int n_layers, int head,
                            int64_t ne0)
{
    const int q3 = m == LLM_QMIX_Q3_K_S || m == LLM_QMIX_Q3_K_M || m == LLM_QMIX_Q3_K_L;
    const enum llm_type base = m == LLM_QMIX_Q6_K                             ? LLM_TYPE_Q6_K
                             : m == LLM_QMIX_Q5_K_S || m == LLM_QMIX_Q5_K_M ? LLM_TYPE_Q5_K
                             : q3                                             ? LLM_TYPE_Q3_K
                                                                              : LLM_TYPE_Q4_K;
    if (head) /* llama.cpp gives the head q8_0 outright when 256 does not divide its rows */
        return ne0 % 256 ? LLM_TYPE_Q8_0 : LLM_TYPE_Q6_K;
    const int v = ends_with(name, "attn_v.weight"), down = strstr(name, "ffn_down") != NULL;
    /* q3_k_m and q3_k_l lift the attention's output projection too (for
     * models without experts) */
    if (ends_with(name, "attn_output.weight") && (m == LLM_QMIX_Q3_K_M || m == LLM_QMIX_Q3_K_L))
        return m == LLM_QMIX_Q3_K_M ? LLM_TYPE_Q4_K : LLM_TYPE_Q5_K;
    if (layer < 0 || (!v && !down)) {
        if (ends_with(name, "attn_qkv.weight"))
            return m == LLM_QMIX_Q4_K_M                             ? LLM_TYPE_Q5_K
                   : m == LLM_QMIX_Q5_K_M                           ? LLM_TYPE_Q6_K
                   : m == LLM_QMIX_Q3_K_M || m == LLM_QMIX_Q3_K_L ? LLM_TYPE_Q4_K
                                                                    : base;
        return base;
    }
    switch (m) {
    case LLM_QMIX_Q3_K_M: /* attn_v: q5_k for the first two; ffn_down: q5_k for the first 16th */
        return (v ? layer < 2 : layer < n_layers / 16) ? LLM_TYPE_Q5_K : LLM_TYPE_Q4_K;
    case LLM_QMIX_Q3_K_L:
        return LLM_TYPE_Q5_K;
    case LLM_QMIX_Q4_K_M:
    case LLM_QMIX_Q5_K_M:
        return more_bits(layer, n_layers) ? LLM_TYPE_Q6_K : base;
    case LLM_QMIX_Q4_K_S:
        return (v ? layer < 4 : layer < n_layers / 8) ? LLM_TYPE_Q5_K : base;
    default:
        return base;
    }
}

enum llm_type llm_q_fallback(enum llm_type t, int64_t ne0)
{
    const struct llm_type_traits *tr = llm_type_traits(t);
    if (!tr || !llm_type_whole_blocks(t) || ne0 % tr->blck == 0)
        return t;
    enum llm_type f;
    switch (t) {
    case LLM_TYPE_Q4_K: f = LLM_TYPE_Q5_0; break;
    case LLM_TYPE_Q5_K: f = LLM_TYPE_Q5_1; break;
    case LLM_TYPE_Q6_K:
    case LLM_TYPE_Q8_K: f = LLM_TYPE_Q8_0; break;
    case LLM_TYPE_Q2_K:
    case LLM_TYPE_Q3_K:
    case LLM_TYPE_IQ4_XS: f = LLM_TYPE_IQ4_NL; break;
    default: f = LLM_TYPE_F16; break; /* q5_0, q5_1, iq4_nl themselves */
    }
    return ne0 % 32 ? LLM_TYPE_F16 : f;
}

void llm_qspec_unset(struct llm_qspec *s)
{
    s->method = s->bits = s->group = s->sym = s->double_quant = s->per_tensor = s->type = -1;
}

void llm_qspec_default(struct llm_qspec *s)
{
    llm_qspec_unset(s);
    s->method = LLM_QM_RTN;
    s->bits = 4;
    s->group = 128;
    s->double_quant = 0;
    s->per_tensor = 0;
}

/* b over a: fields b sets replace a's. */
static void spec_over(struct llm_qspec *a, const struct llm_qspec *b)
{
    if (b->method >= 0)
        a->method = b->method;
    /* nf4 has its own block size: an inherited group does not apply */
    if (b->method == LLM_QM_NF4 && b->group < 0)
        a->group = 64;
    if (b->bits >= 0)
        a->bits = b->bits;
    if (b->group >= 0)
        a->group = b->group;
    if (b->sym >= 0)
        a->sym = b->sym;
    if (b->double_quant >= 0)
        a->double_quant = b->double_quant;
    if (b->per_tensor >= 0)
        a->per_tensor = b->per_tensor;
    if (b->type >= 0)
        a->type = b->type;
}

llm_status llm_qspec_type(const struct llm_qspec *s, enum llm_type cur, enum llm_type *out)
{
    const char *m = llm_qmethod_name((enum llm_qmethod)s->method);
    switch (s->method) {
    case LLM_QM_KEEP:
        *out = s->type >= 0 ? (enum llm_type)s->type : cur;
        return LLM_OK;
    case LLM_QM_NF4:
        if (s->group > 0 && s->group != 64)
            return llm_error_set(LLM_E_INVALID, "nf4 uses blocks of 64 (group %d asked)", s->group);
        *out = s->double_quant > 0 ? LLM_TYPE_NF4_DQ : LLM_TYPE_NF4;
        return LLM_OK;
    case LLM_QM_FP8:
        *out = LLM_TYPE_FP8_E4M3;
        return LLM_OK;
    case LLM_QM_RTN:
        if (s->type >= 0) {
            *out = (enum llm_type)s->type;
            return LLM_OK;
        }
        break;
    case LLM_QM_GPTQ:
    case LLM_QM_AWQ:
        if (s->type >= 0 && llm_kq_type((enum llm_type)s->type)) {
            *out = (enum llm_type)s->type; /* on a GGUF block type's grid */
            return LLM_OK;
        }
        if (s->type >= 0)
            return llm_error_set(LLM_E_INVALID, "%s takes bits/group/sym, not an explicit type "
                                 "(other than a GGUF block type: q4_k ...)", m);
        break;
    default:
        return llm_error_set(LLM_E_INVALID, "no method");
    }
    if (s->bits != 3 && s->bits != 4 && s->bits != 8)
        return llm_error_set(LLM_E_INVALID, "%s: %d bits is not supported (3, 4, 8)", m, s->bits);
    if (s->method == LLM_QM_AWQ && s->bits == 8)
        return llm_error_set(LLM_E_INVALID, "awq: %d bits is not supported (3, 4)", s->bits);
    if (s->group != 32 && s->group != 64 && s->group != 128 && s->group != 0)
        return llm_error_set(LLM_E_INVALID, "%s: group %d is not supported (32, 64, 128, or "
                             "channel)", m, s->group);
    int sym = s->sym >= 0 ? s->sym : (s->method != LLM_QM_AWQ && s->bits == 8);
    int t = llm_qgrid_type(s->bits, !sym, s->group);
    if (t < 0) /* GPTQ's 3-bit grid: zero points only */
        return llm_error_set(LLM_E_INVALID, "%s: %d bits has only the zero-point grid, not a "
                             "symmetric one", m, s->bits);
    *out = (enum llm_type)t;
    return LLM_OK;
}

/* ---- YAML ----------------------------------------------------------- */

struct rp {
    yaml_document_t doc;
    const char *path;
};

static int line_of(const yaml_node_t *n)
{
    return (int)n->start_mark.line + 1;
}

static llm_status err_at(const struct rp *p, const yaml_node_t *n, const char *what)
{
    return llm_error_set(LLM_E_INVALID, "%s:%d: %s", p->path, line_of(n), what);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static llm_status get_int(const struct rp *p, const yaml_node_t *v, const char *key, long lo,
                          long hi, int *out)
{
    const char *s = scalar(v);
    char *end;
    long x = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || x < lo || x > hi) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s must be an integer in %ld..%ld (got '%s')", key, lo, hi,
                 s ? s : "a non-scalar");
        return err_at(p, v, msg);
    }
    *out = (int)x;
    return LLM_OK;
}

static llm_status get_bool(const struct rp *p, const yaml_node_t *v, const char *key, int *out)
{
    const char *s = scalar(v);
    if (s && (!strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcmp(s, "1")))
        *out = 1;
    else if (s && (!strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcmp(s, "0")))
        *out = 0;
    else {
        char msg[160];
        snprintf(msg, sizeof msg, "%s must be true or false (got '%s')", key,
                 s ? s : "a non-scalar");
        return err_at(p, v, msg);
    }
    return LLM_OK;
}

/* A spec mapping; `match` (rules only) receives the pattern. */
static llm_status parse_spec(const struct rp *p, yaml_node_t *map, struct llm_qspec *spec,
                             const char **match)
{
    llm_qspec_unset(spec);
    if (map->type != YAML_MAPPING_NODE)
        return err_at(p, map, match ? "a rule must be a mapping (match: PATTERN, method: ...)"
                                    : "default must be a mapping (method: ..., bits: ...)");
    for (yaml_node_pair_t *kv = map->data.mapping.pairs.start; kv < map->data.mapping.pairs.top;
         kv++) {
        yaml_node_t *k = yaml_document_get_node((yaml_document_t *)&p->doc, kv->key);
        yaml_node_t *v = yaml_document_get_node((yaml_document_t *)&p->doc, kv->value);
        const char *key = scalar(k), *val = scalar(v);
        if (!key)
            return err_at(p, k, "keys must be plain words");
        for (yaml_node_pair_t *o = map->data.mapping.pairs.start; o < kv; o++) {
            const char *ok = scalar(yaml_document_get_node((yaml_document_t *)&p->doc, o->key));
            if (ok && !strcmp(ok, key)) {
                char msg[200];
                snprintf(msg, sizeof msg, "'%s' appears twice", key);
                return err_at(p, k, msg);
            }
        }
        if (match && !strcmp(key, "match")) {
            if (!val || !*val)
                return err_at(p, v, "match must be a tensor-name pattern");
            *match = val;
        } else if (!strcmp(key, "method")) {
            enum llm_qmethod m = LLM_QM_KEEP;
            if (!val || llm_qmethod_parse(val, &m)) {
                llm_error_clear();
                char msg[160];
                snprintf(msg, sizeof msg, "unknown method '%s' (keep, rtn, gptq, awq, nf4, fp8)",
                         val ? val : "?");
                return err_at(p, v, msg);
            }
            spec->method = (int)m;
        } else if (!strcmp(key, "bits")) {
            LLM_TRY(get_int(p, v, "bits", 1, 16, &spec->bits));
        } else if (!strcmp(key, "group")) {
            if (val && (!strcmp(val, "channel") || !strcmp(val, "-1")))
                spec->group = 0;
            else
                LLM_TRY(get_int(p, v, "group", 1, 1 << 20, &spec->group));
        } else if (!strcmp(key, "sym")) {
            LLM_TRY(get_bool(p, v, "sym", &spec->sym));
        } else if (!strcmp(key, "double_quant")) {
            LLM_TRY(get_bool(p, v, "double_quant", &spec->double_quant));
        } else if (!strcmp(key, "scale")) {
            if (val && !strcmp(val, "tensor"))
                spec->per_tensor = 1;
            else if (val && !strcmp(val, "channel"))
                spec->per_tensor = 0;
            else if (val && !strcmp(val, "auto"))
                spec->per_tensor = LLM_FP8_SCALE_AUTO;
            else
                return err_at(p, v, "scale must be tensor, channel or auto");
        } else if (!strcmp(key, "type")) {
            enum llm_type t;
            if (!val || llm_type_parse(val, &t)) {
                llm_error_clear();
                char msg[200];
                snprintf(msg, sizeof msg, "unknown type '%s'", val ? val : "?");
                return err_at(p, v, msg);
            }
            spec->type = (int)t;
        } else {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown key '%s' (%smethod, bits, group, sym, "
                     "double_quant, scale, type)", key, match ? "match, " : "");
            return err_at(p, k, msg);
        }
    }
    if (match && !*match)
        return err_at(p, map, "rule has no 'match' key");
    /* A spec must be possible on its own terms; the type it gives is
     * checked again per tensor. */
    struct llm_qspec full;
    llm_qspec_default(&full);
    spec_over(&full, spec);
    enum llm_type t;
    llm_status ts = llm_qspec_type(&full, LLM_TYPE_F32, &t);
    if (ts) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", llm_error_detail(ts));
        llm_error_clear();
        return err_at(p, map, msg);
    }
    return LLM_OK;
}

static llm_status parse_doc(struct rp *p, struct llm_recipe *r)
{
    yaml_node_t *root = yaml_document_get_root_node(&p->doc);
    if (!root)
        return llm_error_set(LLM_E_INVALID, "%s: the recipe is empty", p->path);
    if (root->type != YAML_MAPPING_NODE)
        return err_at(p, root, "a recipe is a mapping with 'default' and 'rules'");
    for (yaml_node_pair_t *kv = root->data.mapping.pairs.start;
         kv < root->data.mapping.pairs.top; kv++) {
        yaml_node_t *k = yaml_document_get_node(&p->doc, kv->key);
        yaml_node_t *v = yaml_document_get_node(&p->doc, kv->value);
        const char *key = scalar(k);
        int dup = 0;
        for (yaml_node_pair_t *o = root->data.mapping.pairs.start; o < kv && key; o++)
            dup |= scalar(yaml_document_get_node(&p->doc, o->key)) &&
                   !strcmp(scalar(yaml_document_get_node(&p->doc, o->key)), key);
        if (dup) {
            char msg[200];
            snprintf(msg, sizeof msg, "'%s' appears twice", key);
            return err_at(p, k, msg);
        }
        if (key && !strcmp(key, "default")) {
            LLM_TRY(parse_spec(p, v, &r->def, NULL));
        } else if (key && !strcmp(key, "rules")) {
            if (v->type != YAML_SEQUENCE_NODE)
                return err_at(p, v, "rules must be a list of rules (- match: PATTERN ...)");
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            r->rules = llm_calloc(n ? n : 1, sizeof *r->rules);
            if (!r->rules)
                return LLM_E_NOMEM;
            for (yaml_node_item_t *it = v->data.sequence.items.start;
                 it < v->data.sequence.items.top; it++) {
                yaml_node_t *rn = yaml_document_get_node(&p->doc, *it);
                struct llm_recipe_rule *rule = &r->rules[r->n_rules];
                const char *match = NULL;
                const char **mp = &match;
                LLM_TRY(parse_spec(p, rn, &rule->spec, mp));
                rule->match = llm_strdup(match);
                if (!rule->match)
                    return LLM_E_NOMEM;
                rule->line = line_of(rn);
                r->n_rules++;
            }
        } else {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown key '%s' (default, rules)", key ? key : "?");
            return err_at(p, k, msg);
        }
    }
    return LLM_OK;
}

llm_status llm_recipe_parse(struct llm_recipe **out, const char *text, size_t len,
                            const char *path)
{
    *out = NULL;
    if (!path)
        path = "recipe";
    struct llm_recipe *r = llm_calloc(1, sizeof *r);
    if (!r)
        return LLM_E_NOMEM;
    llm_qspec_unset(&r->def);
    r->text = llm_malloc(len + 1);
    if (!r->text) {
        llm_free(r);
        return LLM_E_NOMEM;
    }
    memcpy(r->text, text, len);
    r->text[len] = 0;
    yaml_parser_t yp;
    struct rp p = { .path = path };
    llm_status s = LLM_OK;
    if (!yaml_parser_initialize(&yp)) {
        llm_recipe_free(r);
        return LLM_E_NOMEM;
    }
    yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
    if (!yaml_parser_load(&yp, &p.doc)) {
        s = llm_error_set(LLM_E_INVALID, "%s:%d: %s", path, (int)yp.problem_mark.line + 1,
                          yp.problem ? yp.problem : "YAML syntax error");
        yaml_parser_delete(&yp);
        llm_recipe_free(r);
        return s;
    }
    s = parse_doc(&p, r);
    yaml_document_delete(&p.doc);
    yaml_parser_delete(&yp);
    if (s) {
        llm_recipe_free(r);
        return s;
    }
    *out = r;
    return LLM_OK;
}

void llm_recipe_free(struct llm_recipe *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_rules; i++)
        llm_free(r->rules[i].match);
    llm_free(r->rules);
    llm_free(r->text);
    llm_free(r);
}

void llm_recipe_resolve(const struct llm_recipe *r, const struct llm_qspec *def, const char *name,
                        struct llm_qspec *out, int *line)
{
    *out = *def;
    if (line)
        *line = 0;
    if (!r)
        return;
    spec_over(out, &r->def);
    for (size_t i = 0; i < r->n_rules; i++)
        if (!fnmatch(r->rules[i].match, name, 0)) {
            spec_over(out, &r->rules[i].spec);
            if (line)
                *line = r->rules[i].line;
            return;
        }
}
