/* fuzz_llama2c.c: llama2.c checkpoints (legacy, version 1, version 2 with its
 * dequantizing fill) and tokenizer.bin. The tokenizer gets the input twice:
 * as a whole with a vocabulary size taken from its last two bytes, and after
 * a model parsed from the same bytes, with that model's vocabulary size. */
#include <stddef.h>
#include <stdint.h>

#include "../../lib/common/alloc.h"
#include "../../lib/format/import.h"
#include "../../lib/format/meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_file *f = NULL;
    /* llm_file_add_tensor checks names linearly: keep tensor counts modest */
    if (size > (1u << 18))
        return 0;
    if (llm_llama2c_parse(&f, data, size, "fuzz.bin", NULL) == LLM_OK) {
        for (size_t i = 0; i < f->n_tensors; i++) {
            void *dst = llm_malloc((size_t)f->tensors[i].nbytes);
            if (dst)
                (void)llm_tensor_read(f, &f->tensors[i], dst);
            llm_free(dst);
        }
        int64_t vocab = 0;
        if (llm_meta_get_i64(f->meta, "hparams.vocab_size", &vocab) == LLM_OK)
            (void)llm_llama2c_tokenizer_parse(f, data, size, "fuzz.tok", (uint32_t)vocab);
        struct llm_vocab_view v;
        (void)llm_file_vocab(f, &v);
        llm_file_free(f);
    }
    if (size >= 2 && llm_file_new(&f, "fuzz.tok", "llama2c") == LLM_OK) {
        uint32_t n = (uint32_t)data[size - 2] | (uint32_t)data[size - 1] << 8;
        if (llm_llama2c_tokenizer_parse(f, data, size - 2, "fuzz.tok", n) == LLM_OK) {
            struct llm_vocab_view v;
            (void)llm_file_vocab(f, &v);
        }
        llm_file_free(f);
    }
    return 0;
}
