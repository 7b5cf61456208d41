/* fuzz_spm.c: libFuzzer target for the SentencePiece tokenizer.model
 * reader. An accepted model must give a consistent vocabulary. */
#include <stddef.h>
#include <stdint.h>

#include "../../lib/format/file.h"
#include "../../lib/format/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_file *f;
    if (llm_file_new(&f, "fuzz.model", "hf") != LLM_OK)
        return 0;
    if (llm_spm_parse(f, data, size, "fuzz.model") == LLM_OK) {
        struct llm_vocab_view v;
        if (llm_file_vocab(f, &v) != LLM_OK || v.n_tokens == 0 || !v.scores || !v.types)
            __builtin_trap();
    }
    llm_file_free(f);
    return 0;
}
