/* fuzz_tokenize.c: libFuzzer target for the tokenizers and chat templates.
 *
 * Input: byte 0 picks a vocabulary (the llama.cpp test vocabularies and
 * stories260K from $LLM_DATA or ../shared/data) or, past the last one, the
 * chat renderer with the rest as template text; byte 1 holds the tokenize
 * flags; the rest is the text. Any text must tokenize; without special-token
 * parsing, decode(encode(s)) must give s back, except where the vocabulary
 * cannot say it (U+2581 in SentencePiece text; bytes that never occur in
 * UTF-8 for vocabularies without byte tokens for them; phi-3's user-defined
 * "</s>", which llama.cpp gives RSTRIP). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/common/alloc.h"
#include "../../lib/format/file.h"
#include "../../lib/format/import.h"
#include "../../lib/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct {
    const char *rel;
    int spm;        /* SentencePiece: U+2581 cannot round-trip */
    int utf8_bytes; /* no tokens for C0, C1, F1, F5..FF */
    const char *ud; /* a user-defined token that strips the spaces after it */
} vocabs[] = {
    { "vocab/ggml-vocab-llama-spm.gguf", 1, 0, NULL },
    { "vocab/ggml-vocab-phi-3.gguf", 1, 0, "</s>" },
    { "vocab/ggml-vocab-gpt-2.gguf", 0, 0, NULL },
    { "vocab/ggml-vocab-starcoder.gguf", 0, 1, NULL },
    { "vocab/ggml-vocab-deepseek-coder.gguf", 0, 1, NULL },
    { "gguf/stories260K.gguf", 1, 0, NULL },
};
#define N_VOCABS (sizeof vocabs / sizeof vocabs[0])

static struct llm_file *files[N_VOCABS];
static struct llm_tokenizer *toks[N_VOCABS];

static void load(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    const char *root = getenv("LLM_DATA");
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root && *root ? root : "../shared/data",
                 vocabs[i].rel);
        if (llm_gguf_open(&files[i], path, NULL) != LLM_OK) {
            files[i] = NULL;
            continue;
        }
        if (llm_tokenizer_new(&toks[i], files[i]) != LLM_OK)
            __builtin_trap(); /* a real vocabulary must load */
    }
}

static int has_seq(const uint8_t *p, size_t n, const char *seq, size_t k)
{
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(p + i, seq, k) == 0)
            return 1;
    return 0;
}

static void chat(const uint8_t *p, size_t n)
{
    struct llm_file *f;
    if (llm_file_new(&f, "fuzz.llm", "synthetic") != LLM_OK)
        return;
    char *tmpl = llm_strndup((const char *)p, n);
    if (tmpl && llm_meta_set_str(f->meta, "chat_template", tmpl) == LLM_OK) {
        static const struct llm_chat_msg m[] = {
            { "system", "s" }, { "user", "u" }, { "assistant", "a" }, { "user", "v" } };
        for (size_t k = 0; k <= 4; k++) {
            char *out = NULL;
            if (llm_chat_render(f, NULL, m + (k == 4), k == 4 ? 3 : k, (int)(k & 1), &out) ==
                LLM_OK) {
                if (!out)
                    __builtin_trap();
                llm_free(out);
            }
        }
    }
    llm_free(tmpl);
    llm_file_free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    load();
    size_t which = data[0] % (N_VOCABS + 1);
    const uint8_t *text = data + 2;
    size_t len = size - 2;
    if (which == N_VOCABS) {
        chat(text, len);
        return 0;
    }
    struct llm_tokenizer *t = toks[which];
    if (!t)
        return 0;
    int flags = data[1] & (LLM_TOK_ADD_BOS | LLM_TOK_PARSE_SPECIAL);
    int32_t *ids = NULL;
    size_t n = 0;
    if (llm_tokenize(t, (const char *)text, len, flags, &ids, &n) != LLM_OK)
        __builtin_trap(); /* every text has a tokenization */
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= llm_tokenizer_n_tokens(t))
            __builtin_trap();
    char *back = NULL;
    size_t blen = 0;
    if (llm_detokenize(t, ids, n, 1, &back, &blen) != LLM_OK)
        __builtin_trap();
    llm_free(back);
    int roundtrip = !(flags & LLM_TOK_PARSE_SPECIAL);
    if (vocabs[which].spm && has_seq(text, len, "\xe2\x96\x81", 3))
        roundtrip = 0;
    if (vocabs[which].ud && has_seq(text, len, vocabs[which].ud, strlen(vocabs[which].ud)))
        roundtrip = 0;
    if (vocabs[which].utf8_bytes)
        for (size_t i = 0; i < len; i++)
            if (text[i] == 0xc0 || text[i] == 0xc1 || text[i] == 0xf1 || text[i] >= 0xf5)
                roundtrip = 0;
    if (roundtrip) {
        if (llm_detokenize(t, ids, n, 0, &back, &blen) != LLM_OK)
            __builtin_trap();
        if (blen != len || memcmp(back, text, len) != 0)
            __builtin_trap();
        llm_free(back);
    }
    llm_free(ids);
    return 0;
}
