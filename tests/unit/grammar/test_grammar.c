/* test_grammar.c: GBNF parsing (errors with their positions), what a
 * grammar accepts, and masks checked token by token against a plain
 * simulation on real vocabularies (GPT-2's byte-level BPE, which splits
 * characters across tokens, and Llama's SentencePiece). */
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/format/import.h"
#include "../../../lib/grammar/grammar.h"
#include "../../../lib/tokenizer/tokenizer.h"
#include "../helpers.h"

static struct llm_grammar *parse_ok(const char *src)
{
    struct llm_grammar *g = NULL;
    llm_status s = llm_grammar_parse(&g, src, strlen(src), "g");
    cr_assert_eq(s, LLM_OK, "%s: %s", src, llm_error_detail(s));
    return g;
}

static void parse_fails(const char *src, const char *detail)
{
    struct llm_grammar *g = NULL;
    llm_status s = llm_grammar_parse(&g, src, strlen(src), "g");
    cr_assert_eq(s, LLM_E_FORMAT, "%s: parsed", src);
    cr_assert_null(g);
    cr_assert_str_eq(llm_error_detail(s), detail, "%s", src);
}

Test(grammar, errors_name_line_and_column)
{
    parse_fails("root ::= \"abc", "g:1:10: expected '\"' to end the literal");
    parse_fails("root ::= x\n", "g:1:10: undefined rule 'x'");
    parse_fails("root ::= \"a\"\nb ::= [a-", "g:2:7: expected ']' to end the class");
    parse_fails("root = \"x\"", "g:1:6: expected '::='");
    parse_fails("root ::= ( \"a\" \n", "g:2:1: expected ')'");
    parse_fails("root ::= \"a\"{3,1}", "g:1:13: repetition with its maximum below its minimum");
    parse_fails("root ::= * \"a\"", "g:1:10: expected an item before the repetition");
    parse_fails("root ::= \"\\q\"", "g:1:11: unknown escape (expected one of \\x \\u \\U \\t \\n \\r \\\\ \\\" \\[ \\])");
    parse_fails("root ::= [z-a]", "g:1:10: character range out of order");
    parse_fails("root ::= \"a\" )", "g:1:14: unexpected ')'");
    parse_fails("# comment\n\nroot ::= \"a\"\nroot ::= \"b\"", "g:4:1: rule defined twice");
    parse_fails("a ::= \"x\"", "g: no rule named 'root'");
    parse_fails("root ::= root \"a\" | \"b\"", "g: rule 'root' is left-recursive");
    /* through a nullable prefix and a group, with a frame pushed each round */
    parse_fails("root ::= x\nx ::= \"a\"? ( y \"z\" | \"c\" )\ny ::= [b]* x", "g: rule 'y' is left-recursive");
}

static void accepts(const struct llm_grammar *g, const char *s, int want)
{
    cr_assert_eq(llm_grammar_accepts(g, s, strlen(s)), want, "'%s' should be %s", s,
                 want ? "accepted" : "refused");
}

Test(grammar, language)
{
    struct llm_grammar *g = parse_ok("root ::= \"a\"{2,3} ( [x-z] | \"\\u00e9\" )* b? # comment\n"
                                     "b ::= [^a-c\\]]\n");
    accepts(g, "aa", 1);
    accepts(g, "aaa", 1);
    accepts(g, "a", 0);
    accepts(g, "aaaa", 0); /* the 4th a is not [^a-c\]] */
    accepts(g, "aaxyz\xc3\xa9z", 1);
    accepts(g, "aad", 1);
    accepts(g, "aa]", 0);
    accepts(g, "aaw", 1);  /* b */
    accepts(g, "aawx", 0); /* b is last */
    accepts(g, "aa\xe4\xb8\xad", 1); /* b takes any other code point */
    llm_grammar_free(g);
    g = parse_ok("root ::= (\n  \"x\" |\n  \"yy\" )+ \".\"{0,} end\nend ::= .\n");
    accepts(g, "xyyx!", 1);
    accepts(g, "xyyx...!", 1);
    accepts(g, "xyx!", 0);
    accepts(g, "\xf0\x9f\x98\x80", 0);
    accepts(g, "x\xf0\x9f\x98\x80", 1);
    llm_grammar_free(g);
    /* a cycle of tail calls through rules that can be empty pushes nothing:
     * a loop, not left recursion; and repetitions of what can be empty */
    g = parse_ok("root ::= x\nx ::= \"a\"? ( y | \"c\" )\ny ::= [b]* x\n");
    accepts(g, "abbabc", 1);
    accepts(g, "c", 1);
    accepts(g, "abba", 0);
    llm_grammar_free(g);
    g = parse_ok("root ::= ( \"x\"? )* ( [a-b]* | \"\" )+ \"!\"\n");
    accepts(g, "xxab!", 1);
    accepts(g, "!", 1);
    accepts(g, "xa", 0);
    llm_grammar_free(g);
    g = parse_ok("root ::= \"\" | \"a\" root \"b\"\n"); /* right recursion, nested */
    accepts(g, "", 1);
    accepts(g, "aaabbb", 1);
    accepts(g, "aabbb", 0);
    llm_grammar_free(g);
}

Test(grammar, json)
{
    struct llm_grammar *g = parse_ok(llm_grammar_json);
    accepts(g, "{\"a\": [1, -2.5e+3, true, null, \"x\\u00e9\\n\"], \"b\": {}}", 1);
    accepts(g, "[]", 1);
    accepts(g, " \"\xe4\xb8\xad\"", 1);
    accepts(g, "{\"a\": }", 0);
    accepts(g, "{\"a\": 01}", 0);
    accepts(g, "[1,]", 0);
    accepts(g, "\"tab\there\"", 0);
    accepts(g, "{\"a\": 1", 0);
    llm_grammar_free(g);
}

static struct llm_file *vocab_file(const char *rel)
{
    const char *p = llm_test_data(rel);
    if (!p)
        return NULL;
    struct llm_file *f = NULL;
    llm_status s = llm_gguf_open(&f, p, NULL);
    cr_assert_eq(s, LLM_OK, "%s: %s", p, llm_error_detail(s));
    return f;
}

/* At each state reached by the tokens of `text`, the mask must equal what
 * feeding every token to a copy of the state says, EOS must be allowed
 * exactly where the grammar can end, and the text's own next token must be
 * allowed. */
static void check_masks(const char *vocab, const char *gbnf, const char *text)
{
    struct llm_file *f = vocab_file(vocab);
    if (!f) {
        cr_skip_test("test data %s is absent", vocab);
        return;
    }
    struct llm_tokenizer *t = NULL;
    cr_assert_eq(llm_tokenizer_new(&t, f), LLM_OK);
    struct llm_grammar *g = parse_ok(gbnf);
    struct llm_gmask *m = NULL;
    struct llm_gmatch *s = NULL, *c = NULL;
    cr_assert_eq(llm_gmask_new(&m, g, t), LLM_OK);
    cr_assert_eq(llm_gmatch_new(&s, m), LLM_OK);
    int32_t *ids;
    size_t n;
    cr_assert_eq(llm_tokenize(t, text, strlen(text), 0, &ids, &n), LLM_OK);
    int32_t nv = (int32_t)llm_tokenizer_n_tokens(t), eos = llm_tokenizer_eos(t);
    uint64_t *want = llm_calloc((size_t)(nv + 63) / 64, 8);
    for (size_t i = 0; i <= n; i++) {
        const uint64_t *bits;
        int32_t count, only, wc = 0;
        cr_assert_eq(llm_gmatch_allowed(s, &bits, &count, &only), LLM_OK);
        for (int32_t id = 0; id < nv; id++) {
            cr_assert_eq(llm_gmatch_copy(&c, s), LLM_OK);
            llm_error_clear();
            int ok = llm_gmatch_accept(c, id) == LLM_OK;
            llm_gmatch_free(c);
            int got = (int)((bits[id / 64] >> (id % 64)) & 1);
            cr_assert_eq(got, ok, "%s, after %zu tokens: token %d: mask %d, simulation %d", vocab,
                         i, id, got, ok);
            wc += ok;
        }
        cr_assert_eq(count, wc);
        cr_assert_eq(only, wc == 1 ? only : -1);
        if (eos >= 0)
            cr_assert_eq((int)((bits[eos / 64] >> (eos % 64)) & 1), llm_gmatch_can_end(s));
        if (i < n) {
            cr_assert((bits[ids[i] / 64] >> (ids[i] % 64)) & 1, "token %zu (%d) of the text refused",
                      i, ids[i]);
            cr_assert_eq(llm_gmatch_accept(s, ids[i]), LLM_OK);
        }
    }
    cr_assert(llm_gmatch_can_end(s), "the whole text should be a sentence of the grammar");
    if (eos >= 0) {
        cr_assert_eq(llm_gmatch_accept(s, eos), LLM_OK);
        cr_assert(llm_gmatch_must_end(s));
    }
    struct llm_gmask_stats st;
    llm_gmask_stats(m, &st);
    cr_assert_eq(st.n_masks, (int64_t)n + 1);
    llm_free(want);
    llm_free(ids);
    llm_gmatch_free(s);
    llm_gmask_free(m);
    llm_grammar_free(g);
    llm_tokenizer_free(t);
    llm_file_free(f);
}

Test(grammar, json_masks_gpt2, .timeout = 120)
{
    check_masks("vocab/ggml-vocab-gpt-2.gguf", llm_grammar_json,
                "{\"name\": \"Ada\", \"tags\": [\"x\\\"y\", 12.5e-3, true], \"d\": {\"\xe4\xb8\xad\xe6\x96\x87\": null}}");
}

Test(grammar, json_masks_spm, .timeout = 120)
{
    check_masks("vocab/ggml-vocab-llama-spm.gguf", llm_grammar_json,
                "[{\"k\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"}, -0.5]");
}

/* Tokens that end inside a character, and a rule boundary inside tokens. */
Test(grammar, utf8_and_rule_spanning_masks, .timeout = 120)
{
    check_masks("vocab/ggml-vocab-gpt-2.gguf",
                "root ::= greet \" \" name \"!\"\ngreet ::= \"Hello\" | \"Hi\"\n"
                "name ::= [\xe4\xb8\x80-\xe9\xbe\xa5]+ | [A-Z] [a-z]*\n",
                "Hello \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97!");
}

/* Independent of the automaton: at the start of a grammar of CJK
 * ideographs, every allowed token of the byte-level vocabulary must be
 * whole characters of the range, then at most the first bytes of one
 * (checked against the UTF-8 encodings of the range itself), and every
 * such token must be allowed. */
Test(grammar, utf8_prefixes_against_the_encodings)
{
    struct llm_file *f = vocab_file("vocab/ggml-vocab-gpt-2.gguf");
    if (!f) {
        cr_skip_test("test data vocab/ggml-vocab-gpt-2.gguf is absent");
        return;
    }
    static uint8_t pre1[256], pre2[65536];
    for (uint32_t c = 0x4E00; c <= 0x9FA5; c++) { /* three bytes each */
        uint8_t b0 = (uint8_t)(0xE0 | c >> 12), b1 = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        pre1[b0] = 1;
        pre2[b0 << 8 | b1] = 1;
    }
    struct llm_tokenizer *t = NULL;
    cr_assert_eq(llm_tokenizer_new(&t, f), LLM_OK);
    struct llm_grammar *g = parse_ok("root ::= [\\u4E00-\\u9FA5]+\n");
    struct llm_gmask *m = NULL;
    struct llm_gmatch *s = NULL;
    cr_assert_eq(llm_gmask_new(&m, g, t), LLM_OK);
    cr_assert_eq(llm_gmatch_new(&s, m), LLM_OK);
    const uint64_t *bits;
    int32_t count, only, want = 0;
    cr_assert_eq(llm_gmatch_allowed(s, &bits, &count, &only), LLM_OK);
    for (int32_t id = 0; id < (int32_t)llm_tokenizer_n_tokens(t); id++) {
        const char *b;
        size_t l, i = 0;
        cr_assert_eq(llm_token_piece(t, id, 0, &b, &l, NULL), LLM_OK);
        const uint8_t *u = (const uint8_t *)b;
        int ok = l > 0 && !llm_tokenizer_is_eog(t, id);
        for (; ok && i + 3 <= l; i += 3) {
            uint32_t c = (uint32_t)(u[i] & 0x0F) << 12 | (uint32_t)(u[i + 1] & 0x3F) << 6 |
                         (u[i + 2] & 0x3F);
            ok = (u[i] & 0xF0) == 0xE0 && (u[i + 1] & 0xC0) == 0x80 && (u[i + 2] & 0xC0) == 0x80 &&
                 c >= 0x4E00 && c <= 0x9FA5;
        }
        if (ok && l - i == 1)
            ok = pre1[u[i]];
        else if (ok && l - i == 2)
            ok = pre2[u[i] << 8 | u[i + 1]];
        cr_assert_eq((int)((bits[id / 64] >> (id % 64)) & 1), ok, "token %d (%zu bytes)", id, l);
        want += ok;
    }
    cr_assert_eq(count, want);
    cr_assert_gt(want, 100);
    llm_gmatch_free(s);
    llm_gmask_free(m);
    llm_grammar_free(g);
    llm_tokenizer_free(t);
    llm_file_free(f);
}
