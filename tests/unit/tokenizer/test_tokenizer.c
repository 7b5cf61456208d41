/* test_tokenizer.c: tokenization against llama.cpp's reference vectors
 * (../shared/data/vocab, NAME.inp and NAME.out), llama2.c vs GGUF import of the same
 * vocabulary, round trips of arbitrary bytes, and the cost of long words. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/io.h"
#include "../../../lib/format/import.h"
#include "../../../lib/tokenizer/tokenizer.h"
#include "../helpers.h"

static struct llm_file *open_gguf(const char *path)
{
    struct llm_file *f = NULL;
    llm_status s = llm_gguf_open(&f, path, NULL);
    cr_assert_eq(s, LLM_OK, "%s: %s", path, llm_error_detail(s));
    return f;
}

static struct llm_tokenizer *new_tok(struct llm_file *f)
{
    struct llm_tokenizer *t = NULL;
    llm_status s = llm_tokenizer_new(&t, f);
    cr_assert_eq(s, LLM_OK, "tokenizer: %s", llm_error_detail(s));
    return t;
}

static char *slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    llm_status s = llm_read_file(path, 1 << 26, &buf, len);
    cr_assert_eq(s, LLM_OK, "%s: %s", path, llm_error_detail(s));
    return buf;
}

/* Every case of NAME.inp must give the ids of the same line of NAME.out. */
static void check_vocab(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    TEST_DATA(gguf, rel);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    TEST_DATA(inp_path, rel);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    TEST_DATA(out_path, rel);
    struct llm_file *f = open_gguf(gguf);
    struct llm_tokenizer *t = new_tok(f);
    size_t ilen, olen;
    char *inp = slurp(inp_path, &ilen), *out = slurp(out_path, &olen);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *ip = inp, *op = out;
    int cases = 0, bad = 0;
    for (;;) {
        char *end = strstr(ip, sep);
        if (!end)
            break;
        char *eol = strchr(op, '\n');
        cr_assert(eol, "%s: .out has fewer lines than .inp has cases", name);
        *eol = 0;
        int32_t *ids;
        size_t n;
        llm_status s = llm_tokenize(t, ip, (size_t)(end - ip), 0, &ids, &n);
        cr_assert_eq(s, LLM_OK, "%s case %d: %s", name, cases, llm_error_detail(s));
        /* the expected ids */
        char got[8192] = "";
        size_t k = 0;
        for (size_t i = 0; i < n && k + 16 < sizeof got; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, " %d", ids[i]);
        if (strcmp(got, op) != 0) {
            bad++;
            cr_log_error("%s case %d '%.*s':\n  want:%s\n  got: %s", name, cases,
                         (int)(end - ip), ip, op, got);
        }
        /* and the text back from the ids */
        char *back;
        size_t blen;
        s = llm_detokenize(t, ids, n, 0, &back, &blen);
        cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
        cr_expect(blen == (size_t)(end - ip) && memcmp(back, ip, blen) == 0,
                  "%s case %d: detokenize gives '%s'", name, cases, back);
        llm_free(back);
        llm_free(ids);
        cases++;
        ip = end + sizeof sep - 1;
        op = eol + 1;
    }
    cr_assert_eq(cases, 46, "%s: %d cases", name, cases);
    cr_assert_eq(bad, 0, "%s: %d of %d cases differ from llama.cpp", name, bad, cases);
    llm_free(inp);
    llm_free(out);
    llm_tokenizer_free(t);
    llm_file_free(f);
}

Test(tokenizer, vocab_llama_spm) { check_vocab("llama-spm"); }
Test(tokenizer, vocab_phi_3) { check_vocab("phi-3"); }
Test(tokenizer, vocab_gpt_2) { check_vocab("gpt-2"); }
Test(tokenizer, vocab_starcoder) { check_vocab("starcoder"); }
Test(tokenizer, vocab_deepseek_coder) { check_vocab("deepseek-coder"); }

/* ---- llama2.c tokenizer.bin and the GGUF of the same model --------------- */

static struct llm_file *open_l2c(void)
{
    const char *bin = llm_test_data("llama2c/stories260K.bin");
    const char *tok = llm_test_data("llama2c/tok512.bin");
    if (!bin || !tok)
        return NULL;
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    o.tokenizer_path = tok;
    struct llm_file *f = NULL;
    llm_status s = llm_import(&f, bin, &o);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return f;
}

Test(tokenizer, llama2c_and_gguf_agree)
{
    TEST_DATA(gguf, "gguf/stories260K.gguf");
    TEST_DATA(corpus, "text/tinystories_val.txt");
    struct llm_file *fl = open_l2c();
    cr_assert(fl, "llama2c/stories260K.bin or tok512.bin is absent");
    struct llm_file *fg = open_gguf(gguf);
    struct llm_tokenizer *tl = new_tok(fl), *tg = new_tok(fg);
    cr_assert_eq(llm_tokenizer_n_tokens(tl), 512);
    cr_assert_eq(llm_tokenizer_bos(tl), 1);
    cr_assert_eq(llm_tokenizer_eos(tg), 2);
    size_t len;
    char *text = slurp(corpus, &len);
    size_t lines = 0, total = 0;
    for (char *p = text; p < text + len && lines < 2000;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        int32_t *a, *b;
        size_t na, nb;
        cr_assert_eq(llm_tokenize(tl, p, n, LLM_TOK_ADD_BOS, &a, &na), LLM_OK);
        cr_assert_eq(llm_tokenize(tg, p, n, LLM_TOK_ADD_BOS, &b, &nb), LLM_OK);
        cr_assert_eq(na, nb, "line %zu: %zu vs %zu tokens", lines, na, nb);
        cr_assert_eq(memcmp(a, b, na * sizeof *a), 0, "line %zu differs", lines);
        cr_assert_eq(a[0], 1, "BOS first");
        char *back;
        size_t blen;
        cr_assert_eq(llm_detokenize(tl, a, na, 0, &back, &blen), LLM_OK);
        cr_assert(blen == n && memcmp(back, p, n) == 0, "line %zu: round trip '%s'", lines, back);
        llm_free(back);
        total += na;
        llm_free(a);
        llm_free(b);
        lines++;
        p += n + 1;
    }
    cr_assert_gt(total, 10000, "only %zu tokens: the corpus was not read", total);
    llm_free(text);
    llm_tokenizer_free(tl);
    llm_tokenizer_free(tg);
    llm_file_free(fl);
    llm_file_free(fg);
}

/* The ids llama2.c's own encoder gives for "Zoo" (run.c: BOS, then the
 * dummy-prefix space merged into the word). */
Test(tokenizer, stories_known_ids)
{
    TEST_DATA(gguf, "gguf/stories260K.gguf");
    struct llm_file *f = open_gguf(gguf);
    struct llm_tokenizer *t = new_tok(f);
    int32_t *ids;
    size_t n;
    cr_assert_eq(llm_tokenize(t, "Zoo", 3, LLM_TOK_ADD_BOS, &ids, &n), LLM_OK);
    cr_assert_geq(n, 2);
    cr_assert_eq(ids[0], 1);
    /* every id after BOS decodes to a piece of " Zoo" in order */
    char *back;
    size_t blen;
    cr_assert_eq(llm_detokenize(t, ids, n, 0, &back, &blen), LLM_OK);
    cr_assert_str_eq(back, "Zoo");
    const char *piece;
    size_t plen;
    char buf[8];
    cr_assert_eq(llm_token_piece(t, ids[1], 0, &piece, &plen, buf), LLM_OK);
    cr_assert(plen >= 1 && piece[0] == ' ', "first piece carries the prefix space");
    llm_free(back);
    llm_free(ids);
    llm_tokenizer_free(t);
    llm_file_free(f);
}

/* ---- properties ------------------------------------------------------------- */

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* decode(encode(s)) == s for random bytes: invalid UTF-8, NUL, lone
 * continuation bytes, and spaces (which SentencePiece escapes). */
/* Bytes that never occur in UTF-8 (C0, C1, F5..FF) or only for planes 4-7,
 * which have no characters (F1): the starcoder and deepseek-coder
 * vocabularies have no byte token for some of them (deepseek's 13 added
 * tokens carry their byte-level text, which llama.cpp decodes as text), so
 * llama.cpp and we drop or change them. */
static int non_utf8_byte(uint8_t b)
{
    return b == 0xc0 || b == 0xc1 || b == 0xf1 || b >= 0xf5;
}

static void roundtrip(const char *rel, int flags, int utf8_bytes_only)
{
    TEST_DATA(path, rel);
    struct llm_file *f = open_gguf(path);
    struct llm_tokenizer *t = new_tok(f);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    static const char alphabet[] = " a\n\t'sZ9\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x80\xff";
    for (int iter = 0; iter < 300; iter++) {
        char s[96];
        size_t n = rng(&seed) % sizeof s;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng(&seed);
            s[i] = (r & 1) ? (char)(r >> 8) : alphabet[(r >> 8) % (sizeof alphabet - 1)];
            if (utf8_bytes_only && non_utf8_byte((uint8_t)s[i]))
                s[i] = (char)0x80;
        }
        /* U+2581 is the one text SentencePiece cannot give back */
        for (size_t i = 0; i + 2 < n; i++)
            if ((uint8_t)s[i] == 0xe2 && (uint8_t)s[i + 1] == 0x96 && (uint8_t)s[i + 2] == 0x81)
                s[i] = 'x';
        int32_t *ids;
        size_t nid;
        llm_status st = llm_tokenize(t, s, n, flags, &ids, &nid);
        cr_assert_eq(st, LLM_OK, "%s", llm_error_detail(st));
        char *back;
        size_t blen;
        cr_assert_eq(llm_detokenize(t, ids, nid, 0, &back, &blen), LLM_OK);
        cr_assert(blen == n && memcmp(back, s, n) == 0, "%s: iteration %d: %zu bytes back for %zu",
                  rel, iter, blen, n);
        cr_assert_eq(back[blen], 0);
        llm_free(back);
        llm_free(ids);
    }
    llm_tokenizer_free(t);
    llm_file_free(f);
}

Test(tokenizer, roundtrip_spm) { roundtrip("vocab/ggml-vocab-llama-spm.gguf", LLM_TOK_ADD_BOS, 0); }
Test(tokenizer, roundtrip_phi3) { roundtrip("vocab/ggml-vocab-phi-3.gguf", 0, 0); }
Test(tokenizer, roundtrip_stories) { roundtrip("gguf/stories260K.gguf", 0, 0); }
Test(tokenizer, roundtrip_gpt2) { roundtrip("vocab/ggml-vocab-gpt-2.gguf", 0, 0); }
Test(tokenizer, roundtrip_starcoder) { roundtrip("vocab/ggml-vocab-starcoder.gguf", 0, 1); }
Test(tokenizer, roundtrip_deepseek_coder)
{
    roundtrip("vocab/ggml-vocab-deepseek-coder.gguf", 0, 1);
}

Test(tokenizer, out_of_range_ids_are_errors)
{
    TEST_DATA(path, "vocab/ggml-vocab-gpt-2.gguf");
    struct llm_file *f = open_gguf(path);
    struct llm_tokenizer *t = new_tok(f);
    int32_t ids[3] = { 15496, 50257, 11 };
    char *text = NULL;
    size_t len;
    llm_status s = llm_detokenize(t, ids, 3, 0, &text, &len);
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(s), "50257"), "detail: %s", llm_error_detail(s));
    cr_assert_null(text);
    ids[1] = -7;
    s = llm_detokenize(t, ids, 3, 0, &text, &len);
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(s), "-7"), "detail: %s", llm_error_detail(s));
    const char *p;
    char buf[8];
    cr_assert_eq(llm_token_piece(t, 50257, 1, &p, &len, buf), LLM_E_INVALID);
    cr_assert_eq(llm_token_piece(t, 15496, 0, &p, &len, buf), LLM_OK);
    cr_assert(len == 5 && memcmp(p, "Hello", 5) == 0);
    llm_tokenizer_free(t);
    llm_file_free(f);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One 100 kB word: merging must stay near-linear (a heap), not quadratic. */
static void long_word(const char *rel, char ch)
{
    TEST_DATA(path, rel);
    struct llm_file *f = open_gguf(path);
    struct llm_tokenizer *t = new_tok(f);
    size_t n = 100000;
    char *s = llm_malloc(n);
    memset(s, ch, n);
    int32_t *ids;
    size_t nid;
    double t0 = now();
    cr_assert_eq(llm_tokenize(t, s, n, 0, &ids, &nid), LLM_OK);
    double dt = now() - t0;
    cr_assert_lt(dt, 1.0, "%s: %.3f s for a 100 kB word", rel, dt);
    cr_assert_gt(nid, 1000, "%zu tokens", nid);
    char *back;
    size_t blen;
    cr_assert_eq(llm_detokenize(t, ids, nid, 0, &back, &blen), LLM_OK);
    cr_assert(blen == n && memcmp(back, s, n) == 0);
    llm_free(back);
    llm_free(ids);
    llm_free(s);
    llm_tokenizer_free(t);
    llm_file_free(f);
}

Test(tokenizer, long_word_spm) { long_word("vocab/ggml-vocab-llama-spm.gguf", 'a'); }
Test(tokenizer, long_word_bpe) { long_word("vocab/ggml-vocab-gpt-2.gguf", 'a'); }
Test(tokenizer, long_word_deepseek) { long_word("vocab/ggml-vocab-deepseek-coder.gguf", 'z'); }

/* ---- special tokens ------------------------------------------------------------ */

Test(tokenizer, special_tokens_parse_only_when_asked)
{
    TEST_DATA(path, "vocab/ggml-vocab-llama-spm.gguf");
    struct llm_file *f = open_gguf(path);
    struct llm_tokenizer *t = new_tok(f);
    int32_t *ids;
    size_t n;
    /* "Hello <s>." with BOS: llama.cpp (= HF legacy) [1, 15043, 29871, 1, 869] */
    cr_assert_eq(llm_tokenize(t, "Hello <s>.", 10, LLM_TOK_ADD_BOS | LLM_TOK_PARSE_SPECIAL, &ids,
                              &n), LLM_OK);
    int32_t want[] = { 1, 15043, 29871, 1, 869 };
    cr_assert_eq(n, 5);
    cr_assert_eq(memcmp(ids, want, sizeof want), 0, "%d %d %d %d %d", ids[0], ids[1], ids[2],
                 ids[3], ids[4]);
    char *back;
    size_t blen;
    cr_assert_eq(llm_detokenize(t, ids, n, 1, &back, &blen), LLM_OK);
    cr_assert_str_eq(back, "<s>Hello <s> .");
    llm_free(back);
    cr_assert_eq(llm_detokenize(t, ids, n, 0, &back, &blen), LLM_OK);
    cr_assert_str_eq(back, "Hello  .");
    llm_free(back);
    llm_free(ids);
    /* without parse_special the text is text */
    cr_assert_eq(llm_tokenize(t, "<s>", 3, 0, &ids, &n), LLM_OK);
    cr_assert_gt(n, 1);
    for (size_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], 1);
    llm_free(ids);
    /* "Hello this is a test" with BOS (formats.md §2.7) */
    cr_assert_eq(llm_tokenize(t, "Hello this is a test", 20, LLM_TOK_ADD_BOS, &ids, &n), LLM_OK);
    int32_t want2[] = { 1, 15043, 445, 338, 263, 1243 };
    cr_assert_eq(n, 6);
    cr_assert_eq(memcmp(ids, want2, sizeof want2), 0);
    llm_free(ids);
    cr_assert(llm_tokenizer_is_eog(t, 2));
    cr_assert_not(llm_tokenizer_is_eog(t, 1));
    llm_tokenizer_free(t);
    llm_file_free(f);
}

Test(tokenizer, smollm2_chat_tokens)
{
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) {
        cr_skip_test("%s is absent (make demo fetches it)", path);
        return;
    }
    struct llm_file *f = open_gguf(path);
    struct llm_tokenizer *t = new_tok(f);
    int32_t *ids;
    size_t n;
    const char *s = "<|im_start|>user\nHi<|im_end|>\n";
    cr_assert_eq(llm_tokenize(t, s, strlen(s), LLM_TOK_PARSE_SPECIAL, &ids, &n), LLM_OK);
    cr_assert_eq(ids[0], 1, "<|im_start|> is id 1");
    int saw_end = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == 2)
            saw_end = 1;
    cr_assert(saw_end, "<|im_end|> (id 2) parsed");
    cr_assert(llm_tokenizer_is_eog(t, 2));
    llm_free(ids);
    /* as plain text the markers are not single tokens */
    cr_assert_eq(llm_tokenize(t, s, strlen(s), 0, &ids, &n), LLM_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert(ids[i] != 1 && ids[i] != 2);
    llm_free(ids);
    llm_tokenizer_free(t);
    llm_file_free(f);
}

/* ---- the same vocabulary through the other importers ------------------------ */

/* Tokenize the first lines of TinyStories with both and compare. */
static void same_ids(struct llm_tokenizer *a, struct llm_tokenizer *b, int flags)
{
    TEST_DATA(corpus, "text/tinystories_val.txt");
    size_t len;
    char *text = slurp(corpus, &len);
    size_t lines = 0;
    for (char *p = text; p < text + len && lines < 300; lines++) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        int32_t *x, *y;
        size_t nx, ny;
        cr_assert_eq(llm_tokenize(a, p, n, flags, &x, &nx), LLM_OK);
        cr_assert_eq(llm_tokenize(b, p, n, flags, &y, &ny), LLM_OK);
        cr_assert(nx == ny && memcmp(x, y, nx * sizeof *x) == 0, "line %zu differs", lines);
        llm_free(x);
        llm_free(y);
        p += n + 1;
    }
    llm_free(text);
}

Test(tokenizer, sentencepiece_model_agrees_with_gguf)
{
    TEST_DATA(model, "llama2c/tok512.model");
    TEST_DATA(gguf, "gguf/stories260K.gguf");
    size_t len;
    char *buf = slurp(model, &len);
    struct llm_file *fs;
    cr_assert_eq(llm_file_new(&fs, model, "hf"), LLM_OK);
    llm_status s = llm_spm_parse(fs, (const uint8_t *)buf, len, model);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_file *fg = open_gguf(gguf);
    struct llm_tokenizer *ts = new_tok(fs), *tg = new_tok(fg);
    same_ids(ts, tg, LLM_TOK_ADD_BOS);
    llm_tokenizer_free(ts);
    llm_tokenizer_free(tg);
    llm_file_free(fs);
    llm_file_free(fg);
    llm_free(buf);
}

Test(tokenizer, llm_file_keeps_the_tokenizer)
{
    TEST_DATA(gguf, "gguf/stories260K.gguf");
    struct llm_file *fg = open_gguf(gguf);
    char path[512];
    snprintf(path, sizeof path, "%s/s.llm", llm_test_tmpdir());
    struct llm_write_opts wo;
    llm_write_opts_default(&wo);
    llm_status s = llm_llm_write(fg, path, &wo);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_file *fl;
    s = llm_import(&fl, path, NULL);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_tokenizer *tl = new_tok(fl), *tg = new_tok(fg);
    same_ids(tl, tg, LLM_TOK_ADD_BOS);
    llm_tokenizer_free(tl);
    llm_tokenizer_free(tg);
    llm_file_free(fl);
    llm_file_free(fg);
    unlink(path);
}
