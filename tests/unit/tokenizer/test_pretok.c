/* test_pretok.c: regexes recorded by a Hugging Face import
 * (tokenizer.pre_regex) drive the pre-tokenizer: a tokenizer.json built from
 * a llama.cpp test vocabulary, with its pre-tokenizer written as Split
 * regexes, must give llama.cpp's reference ids. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/io.h"
#include "../../../lib/format/file.h"
#include "../../../lib/format/hf.h"
#include "../../../lib/format/import.h"
#include "../../../lib/tokenizer/tokenizer.h"
#include "../helpers.h"

/* tokenizer.json text for the vocabulary of `gguf` with the given Split
 * regexes before a regex-free ByteLevel. */
static char *tokenizer_json(const char *gguf, const char *const *regexes, size_t n)
{
    struct llm_file *f;
    cr_assert_eq(llm_gguf_open(&f, gguf, NULL), LLM_OK);
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    json_t *vocab = json_object(), *merges = json_array(), *pre = json_array();
    json_t *added = json_array();
    for (uint32_t i = 0; i < v.n_tokens; i++) {
        uint32_t a = v.offsets[i], b = v.offsets[i + 1];
        json_object_setn_new(vocab, (const char *)v.bytes + a, b - a, json_integer(i));
        /* control (3) and user-defined (4) tokens are tokenizer.json's added tokens */
        if (v.types && (v.types[i] == 3 || v.types[i] == 4))
            json_array_append_new(
                added, json_pack("{s:i, s:s%, s:b, s:b, s:b, s:b, s:b}", "id", (int)i, "content",
                                 (const char *)v.bytes + a, (size_t)(b - a), "single_word", 0,
                                 "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                                 v.types[i] == 3));
    }
    for (uint32_t i = 0; i < v.n_merges; i++) {
        uint32_t a = v.merge_offsets[i], b = v.merge_offsets[i + 1];
        json_array_append_new(merges, json_stringn((const char *)v.merge_bytes + a, b - a));
    }
    for (size_t i = 0; i < n; i++)
        json_array_append_new(pre, json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split",
                                             "pattern", "Regex", regexes[i], "behavior",
                                             "Isolated", "invert", 0));
    json_array_append_new(pre, json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel",
                                         "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0));
    json_t *root = json_pack("{s:s, s:o, s:{s:s, s:o}, s:{s:s}, s:{s:s, s:o, s:o}}", "version",
                             "1.0", "added_tokens", added, "pre_tokenizer", "type", "Sequence",
                             "pretokenizers", pre, "decoder", "type", "ByteLevel", "model", "type",
                             "BPE", "vocab", vocab, "merges", merges);
    cr_assert(root);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    llm_file_free(f);
    return s;
}

static void check(const char *name, const char *const *regexes, size_t nre)
{
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    TEST_DATA(gguf, rel);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    TEST_DATA(inp_path, rel);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    TEST_DATA(out_path, rel);
    char *json = tokenizer_json(gguf, regexes, nre);
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "tokenizer.json", "hf"), LLM_OK);
    llm_status s = llm_hf_tokenizer_json(f, json, strlen(json), "tokenizer.json", 0);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    free(json);
    const char *pre;
    cr_assert_eq(llm_meta_get_str(f->meta, "tokenizer.pre", &pre), LLM_OK);
    cr_assert_str_eq(pre, "default", "the regexes, not a name, must decide");
    struct llm_meta *seq = llm_meta_get(f->meta, "tokenizer.pre_regex");
    cr_assert(seq && seq->n == nre);
    struct llm_tokenizer *t;
    s = llm_tokenizer_new(&t, f);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    char *inp, *out;
    size_t ilen, olen;
    cr_assert_eq(llm_read_file(inp_path, 1 << 20, &inp, &ilen), LLM_OK);
    cr_assert_eq(llm_read_file(out_path, 1 << 20, &out, &olen), LLM_OK);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int cases = 0;
    for (char *ip = inp, *op = out;; cases++) {
        char *end = strstr(ip, sep), *eol = strchr(op, '\n');
        if (!end || !eol)
            break;
        *eol = 0;
        int32_t *ids;
        size_t n;
        cr_assert_eq(llm_tokenize(t, ip, (size_t)(end - ip), 0, &ids, &n), LLM_OK);
        char got[8192] = "";
        size_t k = 0;
        for (size_t i = 0; i < n && k + 16 < sizeof got; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, " %d", ids[i]);
        cr_assert_str_eq(got, op, "%s case %d", name, cases);
        llm_free(ids);
        ip = end + sizeof sep - 1;
        op = eol + 1;
    }
    cr_assert_eq(cases, 46);
    llm_free(inp);
    llm_free(out);
    llm_tokenizer_free(t);
    llm_file_free(f);
}

/* HF's GPT-2 regex (with the final \s+): the hand-written matcher */
Test(pretok, hf_gpt2_regex)
{
    static const char *const re[] = {
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+" };
    check("gpt-2", re, 1);
}

/* deepseek-coder's five regexes: PCRE2 on collapsed and on UTF-8 text */
Test(pretok, hf_deepseek_coder_regexes)
{
    static const char *const re[] = { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                                      "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
                                      "\\p{N}" };
    check("deepseek-coder", re, 5);
}

/* starcoder: individual digits, then GPT-2 */
Test(pretok, hf_starcoder_regexes)
{
    static const char *const re[] = {
        "\\p{N}",
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+" };
    check("starcoder", re, 2);
}

Test(pretok, bad_regex_is_a_format_error)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "t.llm", "synthetic"), LLM_OK);
    const char *toks[] = { "a", "b", "ab" };
    uint32_t lens[] = { 1, 1, 2 };
    cr_assert_eq(llm_file_set_vocab(f, 3, toks, lens, NULL, NULL), LLM_OK);
    const char *merges[] = { "a b" };
    uint32_t mlens[] = { 3 };
    cr_assert_eq(llm_file_set_merges(f, 1, merges, mlens), LLM_OK);
    cr_assert_eq(llm_meta_set_str(f->meta, "tokenizer.model", "gpt2"), LLM_OK);
    struct llm_meta *seq = llm_meta_new(LLM_META_SEQ);
    llm_meta_push(seq, llm_meta_new_strn("(unclosed", 9));
    cr_assert_eq(llm_meta_set(f->meta, "tokenizer.pre_regex", seq), LLM_OK);
    struct llm_tokenizer *t = NULL;
    llm_status s = llm_tokenizer_new(&t, f);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "(unclosed"), "%s", llm_error_detail(s));
    /* an unknown pre-tokenizer name is unsupported, as in llama.cpp */
    llm_meta_del(f->meta, "tokenizer.pre_regex");
    cr_assert_eq(llm_meta_set_str(f->meta, "tokenizer.pre", "no-such-pre"), LLM_OK);
    s = llm_tokenizer_new(&t, f);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "no-such-pre"), "%s", llm_error_detail(s));
    llm_file_free(f);
}

/* Every llama.cpp pre-tokenizer on long runs (letters, spaces, digits,
 * punctuation, CJK): no regex engine limit may fail, and every byte must
 * come back. The gpt-2 vocabulary stands in for the models' own. */
Test(pretok, every_pre_on_long_runs, .timeout = 120)
{
    TEST_DATA(gguf, "vocab/ggml-vocab-gpt-2.gguf");
    static const char *const pres[] = {
        "default", "llama-bpe", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "mpt",
        "starcoder", "gpt-2", "refact", "command-r", "qwen2", "stablelm2", "olmo", "dbrx",
        "smaug-bpe", "poro-chat", "chatglm-bpe", "viking", "jais", "tekken", "smollm",
        "codeshell", "bloom", "gpt3-finnish", "exaone", "chameleon", "minerva-7b", "megrez",
    };
    static const char *const units[] = { "a", "A", " ", "7", "!", "\xe4\xb8\xad", "\n", " a" };
    size_t n = 60000;
    char *s = llm_malloc(4 * n);
    for (size_t p = 0; p < sizeof pres / sizeof pres[0]; p++) {
        struct llm_file *f;
        cr_assert_eq(llm_gguf_open(&f, gguf, NULL), LLM_OK);
        cr_assert_eq(llm_meta_set_str(f->meta, "tokenizer.pre", pres[p]), LLM_OK);
        struct llm_tokenizer *t;
        llm_status st = llm_tokenizer_new(&t, f);
        cr_assert_eq(st, LLM_OK, "%s: %s", pres[p], llm_error_detail(st));
        for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
            size_t ul = strlen(units[u]), len = 0;
            while (len + ul <= n) {
                memcpy(s + len, units[u], ul);
                len += ul;
            }
            int32_t *ids;
            size_t nid;
            st = llm_tokenize(t, s, len, 0, &ids, &nid);
            cr_assert_eq(st, LLM_OK, "%s, run of '%s': %s", pres[p], units[u],
                         llm_error_detail(st));
            char *back;
            size_t blen;
            cr_assert_eq(llm_detokenize(t, ids, nid, 0, &back, &blen), LLM_OK);
            cr_assert(blen == len && memcmp(back, s, len) == 0, "%s, run of '%s'", pres[p],
                      units[u]);
            llm_free(back);
            llm_free(ids);
        }
        llm_tokenizer_free(t);
        llm_file_free(f);
    }
    llm_free(s);
}

/* llama.cpp's ids for golden/pre-input.txt (mixed scripts, emoji, odd
 * whitespace, code) with the gpt-2 vocabulary under each pre-tokenizer:
 * `llama-tokenize --ids --no-bos --no-escape --no-parse-special` of
 * llama.cpp c392e50 (b4748) on copies of ggml-vocab-gpt-2.gguf whose
 * tokenizer.ggml.pre was changed. They exercise the PCRE2 paths (collapsed
 * \p{..} classes, UTF-8 ranges, look-ahead) against std::regex. */
Test(pretok, llama_cpp_golden_ids_per_pre)
{
    TEST_DATA(gguf, "vocab/ggml-vocab-gpt-2.gguf");
    const char *input = "tests/unit/tokenizer/golden/pre-input.txt";
    if (access(input, R_OK) != 0) {
        cr_skip_test("%s is absent (run from the repository root)", input);
        return;
    }
    static const char *const pres[] = { "default", "qwen2", "tekken", "falcon", "deepseek-llm",
                                        "deepseek-v3", "bloom", "viking", "chameleon",
                                        "llama-bpe" };
    char *text;
    size_t len;
    cr_assert_eq(llm_read_file(input, 1 << 20, &text, &len), LLM_OK);
    for (size_t p = 0; p < sizeof pres / sizeof pres[0]; p++) {
        char path[256];
        snprintf(path, sizeof path, "tests/unit/tokenizer/golden/pre-%s.ids", pres[p]);
        char *want;
        size_t wlen;
        cr_assert_eq(llm_read_file(path, 1 << 20, &want, &wlen), LLM_OK, "%s", path);
        struct llm_file *f;
        cr_assert_eq(llm_gguf_open(&f, gguf, NULL), LLM_OK);
        cr_assert_eq(llm_meta_set_str(f->meta, "tokenizer.pre", pres[p]), LLM_OK);
        struct llm_tokenizer *t;
        cr_assert_eq(llm_tokenizer_new(&t, f), LLM_OK);
        int32_t *ids;
        size_t n;
        cr_assert_eq(llm_tokenize(t, text, len, 0, &ids, &n), LLM_OK);
        char *w = want, *end;
        size_t i = 0;
        for (;; i++) {
            long v = strtol(w, &end, 10);
            if (end == w)
                break;
            w = end;
            cr_assert_lt(i, n, "%s: fewer ids than llama.cpp", pres[p]);
            cr_assert_eq(ids[i], v, "%s: id %zu is %d, llama.cpp has %ld", pres[p], i, ids[i], v);
        }
        cr_assert_eq(i, n, "%s: %zu ids, llama.cpp has %zu", pres[p], n, i);
        cr_assert_gt(n, 300);
        llm_free(ids);
        llm_free(want);
        llm_tokenizer_free(t);
        llm_file_free(f);
    }
    llm_free(text);
}
