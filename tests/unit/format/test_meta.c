/* test_meta.c: YAML metadata tree: typing, round trips, errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/format/meta.h"
#include "../helpers.h"

static struct llm_meta *parse(const char *y)
{
    struct llm_meta *m = NULL;
    llm_status s = llm_meta_parse_yaml(&m, y, strlen(y), "t.yaml");
    cr_assert_eq(s, LLM_OK, "parse failed: %s", llm_error_detail(s));
    return m;
}

static struct llm_meta *roundtrip(const struct llm_meta *m)
{
    char *y;
    size_t n;
    cr_assert_eq(llm_meta_emit_yaml(m, &y, &n), LLM_OK);
    struct llm_meta *back = NULL;
    llm_status s = llm_meta_parse_yaml(&back, y, n, "rt.yaml");
    cr_assert_eq(s, LLM_OK, "re-parse failed: %s\n%s", llm_error_detail(s), y);
    llm_free(y);
    return back;
}

Test(meta, core_schema_scalars)
{
    struct llm_meta *m = parse("a: 12\nb: -3\nc: 1.5e-5\nd: true\ne: null\nf: '12'\ng: hello\n"
                               "h: 0x1f\ni: .inf\nj: \"true\"\nk: 1e5\n");
    int64_t i;
    double d;
    int b;
    const char *s;
    cr_assert_eq(llm_meta_get_i64(m, "a", &i), LLM_OK);
    cr_assert_eq(i, 12);
    cr_assert_eq(llm_meta_get_i64(m, "b", &i), LLM_OK);
    cr_assert_eq(i, -3);
    cr_assert_eq(llm_meta_get_f64(m, "c", &d), LLM_OK);
    cr_assert_eq(d, 1.5e-5);
    cr_assert_eq(llm_meta_get_bool(m, "d", &b), LLM_OK);
    cr_assert_eq(b, 1);
    cr_assert_eq(llm_meta_get(m, "e")->kind, LLM_META_NULL);
    cr_assert_eq(llm_meta_get_str(m, "f", &s), LLM_OK, "a quoted number is a string");
    cr_assert_str_eq(s, "12");
    cr_assert_eq(llm_meta_get_str(m, "g", &s), LLM_OK);
    cr_assert_eq(llm_meta_get_i64(m, "h", &i), LLM_OK);
    cr_assert_eq(i, 31);
    cr_assert_eq(llm_meta_get_f64(m, "i", &d), LLM_OK);
    cr_assert(isinf(d));
    cr_assert_eq(llm_meta_get_str(m, "j", &s), LLM_OK);
    cr_assert_eq(llm_meta_get_f64(m, "k", &d), LLM_OK);
    cr_assert_eq(d, 1e5);
    /* an integer is accepted where a number is asked; not the reverse */
    cr_assert_eq(llm_meta_get_f64(m, "a", &d), LLM_OK);
    cr_assert_eq(d, 12.0);
    cr_assert_eq(llm_meta_get_i64(m, "c", &i), LLM_E_FORMAT);
    cr_assert_eq(llm_meta_get_i64(m, "missing", &i), LLM_E_NOTFOUND);
    llm_meta_free(m);
}

Test(meta, wrong_type_names_the_line)
{
    struct llm_meta *m = parse("hparams:\n  block_count: five\n");
    int64_t i;
    cr_assert_eq(llm_meta_get_i64(m, "hparams.block_count", &i), LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(LLM_E_FORMAT), "line 2"), "%s", llm_error_detail(LLM_E_FORMAT));
    llm_meta_free(m);
}

Test(meta, float32_values_round_trip_exactly)
{
    struct llm_meta *m = llm_meta_new(LLM_META_MAP);
    float vals[] = { 1e-5f, 1e-6f, 10000.0f, 500000.0f, 0.1f, 3.4028235e38f, 1.17549435e-38f, 1.0f };
    char key[32];
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        snprintf(key, sizeof key, "v%zu", i);
        cr_assert_eq(llm_meta_set_f32(m, key, vals[i]), LLM_OK);
    }
    cr_assert_eq(llm_meta_set_f64(m, "pi", 3.141592653589793), LLM_OK);
    struct llm_meta *b = roundtrip(m);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        double d;
        snprintf(key, sizeof key, "v%zu", i);
        cr_assert_eq(llm_meta_get_f64(b, key, &d), LLM_OK, "%s lost its type", key);
        cr_assert_eq((float)d, vals[i], "%s: %.9g != %.9g", key, d, vals[i]);
    }
    double pi;
    cr_assert_eq(llm_meta_get_f64(b, "pi", &pi), LLM_OK);
    cr_assert_eq(pi, 3.141592653589793);
    char *y;
    size_t n;
    cr_assert_eq(llm_meta_emit_yaml(m, &y, &n), LLM_OK);
    cr_assert(strstr(y, "v0: 1e-05\n"), "float32 printed shortest: %s", y);
    cr_assert(strstr(y, "v7: 1.0\n"), "a float that is integral stays a float: %s", y);
    llm_free(y);
    llm_meta_free(m);
    llm_meta_free(b);
}

Test(meta, strings_that_look_like_other_types_stay_strings)
{
    const char *tricky[] = { "true", "12", "1.5", "null", "~", "", "0x10", "- a", "a: b", "#x",
                             "{{ bos_token }}", "  leading", "trailing  ", "multi\nline\n",
                             "tab\there", "\xe2\x96\x81unicode", "quote\"s", "end with newline\n\n" };
    struct llm_meta *m = llm_meta_new(LLM_META_MAP);
    char key[16];
    for (size_t i = 0; i < sizeof tricky / sizeof tricky[0]; i++) {
        snprintf(key, sizeof key, "k%zu", i);
        cr_assert_eq(llm_meta_set_str(m, key, tricky[i]), LLM_OK);
    }
    struct llm_meta *b = roundtrip(m);
    for (size_t i = 0; i < sizeof tricky / sizeof tricky[0]; i++) {
        const char *s;
        snprintf(key, sizeof key, "k%zu", i);
        cr_assert_eq(llm_meta_get_str(b, key, &s), LLM_OK, "'%s' changed type", tricky[i]);
        cr_assert_str_eq(s, tricky[i]);
    }
    llm_meta_free(m);
    llm_meta_free(b);
}

Test(meta, invalid_utf8_and_nul_bytes_survive)
{
    const char raw[] = "a\xff\xfe\0b";
    struct llm_meta *m = llm_meta_new(LLM_META_MAP);
    cr_assert_eq(llm_meta_set_strn(m, "bin", raw, sizeof raw - 1), LLM_OK);
    struct llm_meta *b = roundtrip(m);
    struct llm_meta *n = llm_meta_get(b, "bin");
    cr_assert(n && n->kind == LLM_META_STR);
    cr_assert_eq(n->slen, sizeof raw - 1);
    cr_assert_eq(memcmp(n->s, raw, sizeof raw - 1), 0);
    llm_meta_free(m);
    llm_meta_free(b);
}

Test(meta, nested_paths_sequences_and_order)
{
    struct llm_meta *m = llm_meta_new(LLM_META_MAP);
    cr_assert_eq(llm_meta_set_i64(m, "hparams.block_count", 5), LLM_OK);
    cr_assert_eq(llm_meta_set_str(m, "architecture", "llama"), LLM_OK);
    cr_assert_eq(llm_meta_set_i64(m, "hparams.head_count", 8), LLM_OK);
    struct llm_meta *seq = llm_meta_new(LLM_META_SEQ);
    llm_meta_push(seq, llm_meta_new_i64(1));
    llm_meta_push(seq, llm_meta_new_i64(2));
    cr_assert_eq(llm_meta_set(m, "generation.eos_token_id", seq), LLM_OK);
    struct llm_meta *g = llm_meta_new(LLM_META_MAP);
    cr_assert_eq(llm_meta_put(m, "gguf", g), LLM_OK);
    cr_assert_eq(llm_meta_put(g, "general.url", llm_meta_new_strn("x", 1)), LLM_OK);
    struct llm_meta *b = roundtrip(m);
    cr_assert_str_eq(b->items[0]->key, "hparams", "insertion order kept");
    cr_assert_str_eq(b->items[1]->key, "architecture");
    struct llm_meta *e = llm_meta_get(b, "generation.eos_token_id");
    cr_assert(e && e->kind == LLM_META_SEQ && e->n == 2 && e->items[1]->i == 2);
    struct llm_meta *u = llm_meta_child(llm_meta_get(b, "gguf"), "general.url");
    cr_assert(u && u->kind == LLM_META_STR, "dotted keys are reached with llm_meta_child");
    /* replace and delete */
    cr_assert_eq(llm_meta_set_i64(b, "hparams.block_count", 6), LLM_OK);
    int64_t i;
    llm_meta_get_i64(b, "hparams.block_count", &i);
    cr_assert_eq(i, 6);
    llm_meta_del(b, "hparams.block_count");
    cr_assert_null(llm_meta_get(b, "hparams.block_count"));
    llm_meta_free(m);
    llm_meta_free(b);
}

Test(meta, bad_documents_are_errors_with_line)
{
    const char *bad[] = { "a: 1\na: 2\n", "- 1\n- 2\n", "a: [1, 2\n", "a: &x 1\nb: *x\n",
                          "a: 1\n---\nb: 2\n", "? [1]\n: 2\n" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct llm_meta *m = NULL;
        llm_status s = llm_meta_parse_yaml(&m, bad[i], strlen(bad[i]), "bad.yaml");
        cr_assert_eq(s, LLM_E_FORMAT, "case %zu accepted", i);
        cr_assert(strncmp(llm_error_detail(s), "bad.yaml:", 9) == 0, "%s", llm_error_detail(s));
        cr_assert_null(m);
    }
}

Test(meta, deep_nesting_is_refused)
{
    char buf[4096];
    size_t n = 0;
    n += (size_t)snprintf(buf, sizeof buf, "a: ");
    for (int i = 0; i < 200; i++)
        buf[n++] = '[';
    for (int i = 0; i < 200; i++)
        buf[n++] = ']';
    buf[n++] = '\n';
    struct llm_meta *m = NULL;
    cr_assert_eq(llm_meta_parse_yaml(&m, buf, n, "deep.yaml"), LLM_E_FORMAT);
}

Test(meta, json_output)
{
    struct llm_meta *m = parse("a: 1\nb: [x, 2.5]\nc: {d: \"q\\\"\"}\ne: .nan\n");
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(llm_meta_write_json(m, f, -1), LLM_OK);
    fclose(f);
    cr_assert_str_eq(buf, "{\"a\":1,\"b\":[\"x\",2.5],\"c\":{\"d\":\"q\\\"\"},\"e\":null}");
    free(buf);
    llm_meta_free(m);
}

/* Reading a map of n keys looked each key up among the ones before it:
 * O(n^2), 30 s for 100,000 keys in every tool that opened such a file. The
 * timeout is a guard against that growth, ten times what a linear reader
 * takes even under the sanitizers, not a speed claim. */
#define MANY 100000
Test(meta, many_keys_read_in_linear_time, .timeout = 10)
{
    size_t cap = (size_t)MANY * 24 + 64, n = 0;
    char *y = malloc(cap);
    cr_assert(y);
    n += (size_t)snprintf(y + n, cap - n, "gguf:\n");
    for (int i = 0; i < MANY; i++)
        n += (size_t)snprintf(y + n, cap - n, "  key.%d: %d\n", i, i);
    struct llm_meta *m = NULL;
    llm_status s = llm_meta_parse_yaml(&m, y, n, "many.yaml");
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_meta *g = llm_meta_child(m, "gguf");
    cr_assert_eq(g->n, MANY);
    for (int i = 0; i < MANY; i += 977) {
        char k[32];
        snprintf(k, sizeof k, "key.%d", i);
        cr_assert(llm_meta_child(g, k) && llm_meta_child(g, k)->i == i, "%s", k);
    }
    cr_assert_null(llm_meta_child(g, "key.100000"));
    /* the order is kept, and a duplicate among many is still found */
    cr_assert_str_eq(g->items[MANY - 1]->key, "key.99999");
    n += (size_t)snprintf(y + n, cap - n, "  key.4242: 0\n");
    struct llm_meta *d = NULL;
    s = llm_meta_parse_yaml(&d, y, n, "dup.yaml");
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "duplicate key 'key.4242'"), "%s", llm_error_detail(s));
    /* written and read back, cloned: the same keys */
    char *out;
    size_t len;
    cr_assert_eq(llm_meta_emit_yaml(m, &out, &len), LLM_OK);
    struct llm_meta *back = NULL;
    cr_assert_eq(llm_meta_parse_yaml(&back, out, len, "back.yaml"), LLM_OK);
    struct llm_meta *c = llm_meta_clone(back);
    cr_assert(c && llm_meta_get(c, "gguf") && llm_meta_get(c, "gguf")->n == MANY);
    cr_assert_eq(llm_meta_child(llm_meta_child(c, "gguf"), "key.77777")->i, 77777);
    llm_free(out);
    llm_meta_free(back);
    llm_meta_free(c);
    llm_meta_free(m);
    free(y);
}

Test(meta, set_and_delete_among_many_keys, .timeout = 10)
{
    struct llm_meta *m = llm_meta_new(LLM_META_MAP);
    char k[64];
    for (int i = 0; i < MANY; i++) { /* each set looks for the key first */
        snprintf(k, sizeof k, "types.k%d", i);
        cr_assert_eq(llm_meta_set_i64(m, k, i), LLM_OK);
    }
    struct llm_meta *t = llm_meta_child(m, "types");
    cr_assert_eq(t->n, MANY);
    cr_assert_eq(llm_meta_set_i64(m, "types.k5", -5), LLM_OK); /* replaced in place */
    cr_assert_eq(t->n, MANY);
    cr_assert_eq(llm_meta_child(t, "k5")->i, -5);
    cr_assert_str_eq(t->items[5]->key, "k5");
    for (int i = 0; i < 40; i++) { /* a deletion moves the keys after it */
        snprintf(k, sizeof k, "types.k%d", i * 1000);
        llm_meta_del(m, k);
    }
    cr_assert_eq(t->n, MANY - 40);
    cr_assert_null(llm_meta_child(t, "k1000"));
    cr_assert_eq(llm_meta_child(t, "k1001")->i, 1001);
    cr_assert_eq(llm_meta_child(t, "k99999")->i, 99999);
    llm_meta_free(m);
}
