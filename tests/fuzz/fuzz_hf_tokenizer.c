/* fuzz_hf_tokenizer.c: libFuzzer target for the tokenizer.json reader
 * (vocabulary, added tokens, merges, pre-tokenizer detection). */
#include <stddef.h>
#include <stdint.h>

#include "../../lib/format/file.h"
#include "../../lib/format/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_file *f;
    if (llm_file_new(&f, "fuzz.json", "hf") != LLM_OK)
        return 0;
    /* the min_tokens argument comes from the first byte, to reach padding */
    uint32_t min_tokens = size ? data[0] : 0;
    if (llm_hf_tokenizer_json(f, (const char *)data, size, "tokenizer.json", min_tokens) ==
        LLM_OK) {
        struct llm_vocab_view v;
        if (llm_file_vocab(f, &v) != LLM_OK || v.n_tokens < min_tokens)
            __builtin_trap();
    }
    llm_file_free(f);
    return 0;
}
