/* fuzz_gguf.c: the GGUF reader. Every tensor of a file that parses is then
 * read, which runs the GGML decoders and the re-encoding fill on whatever
 * bytes the input holds; the target type (f16 or q8_0) comes from the last
 * input byte. */
#include <stddef.h>
#include <stdint.h>

#include "../../lib/common/alloc.h"
#include "../../lib/format/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* llm_file_add_tensor checks names linearly: keep tensor counts modest */
    if (size > (1u << 18))
        return 0;
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    if (size && (data[size - 1] & 1))
        o.dequant_type = LLM_TYPE_Q8_0;
    struct llm_file *f = NULL;
    if (llm_gguf_parse(&f, data, size, "fuzz.gguf", &o) != LLM_OK)
        return 0;
    uint64_t budget = 64u << 20; /* decoded bytes per input */
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *t = &f->tensors[i];
        if (t->nbytes > budget)
            break;
        budget -= t->nbytes;
        void *dst = llm_malloc((size_t)t->nbytes);
        if (dst)
            (void)llm_tensor_read(f, t, dst);
        llm_free(dst);
    }
    struct llm_vocab_view v;
    (void)llm_file_vocab(f, &v);
    llm_file_free(f);
    return 0;
}
