/* fuzz_safetensors.c: libFuzzer target for the safetensors reader. Every
 * tensor of an accepted file is read back, so the unaligned-copy path runs
 * too. */
#include <stddef.h>
#include <stdint.h>

#include "../../lib/common/alloc.h"
#include "../../lib/format/file.h"
#include "../../lib/format/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_file *f = NULL;
    /* the values are whatever the input holds: NaN weights are not an
     * error of the reader here */
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    o.nonfinite = LLM_FINITE_IGNORE;
    if (llm_safetensors_parse(&f, data, size, "fuzz.safetensors", &o) != LLM_OK)
        return 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *t = &f->tensors[i];
        /* accepted tensors lie inside the input, so nbytes <= size */
        if (t->nbytes > size)
            __builtin_trap();
        void *buf = llm_malloc(t->nbytes ? (size_t)t->nbytes : 1);
        if (buf && llm_tensor_read(f, t, buf) != LLM_OK)
            __builtin_trap();
        llm_free(buf);
    }
    llm_file_free(f);
    return 0;
}
