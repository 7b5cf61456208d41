/* fuzz_llm.c: the .llm reader (header, YAML metadata, index, trailer) and,
 * for files that parse, tensor loading (decompression and checksums). */
#include <stddef.h>
#include <stdint.h>

#include "../../lib/format/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_file *f = NULL;
    if (llm_llm_parse(&f, data, size, "fuzz.llm", NULL) == LLM_OK) {
        for (size_t i = 0; i < f->n_tensors; i++) {
            const void *p;
            (void)llm_tensor_bytes(f, &f->tensors[i], &p);
        }
        struct llm_vocab_view v;
        (void)llm_file_vocab(f, &v);
        llm_file_free(f);
    }
    return 0;
}
