/* fuzz_model.c: model configuration and weight binding from an untrusted
 * GGUF file (hyper-parameters against tensor shapes, RoPE scaling keys),
 * then a short forward pass for the files that bind. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../lib/format/import.h"
#include "../../lib/model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_file *f = NULL;
    if (llm_gguf_parse(&f, data, size, "fuzz.gguf", NULL) != LLM_OK)
        return 0;
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = 1;
    if (llm_model_from_file(&m, f, &mp) != LLM_OK)
        return 0; /* the file was freed */
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 4;
    cp.block_size = 2;
    if (llm_context_new(&c, m, &cp) == LLM_OK) {
        int32_t tok[3] = { 0, 1, 2 };
        int32_t nv = llm_model_config(m)->n_vocab;
        float *logits = nv > 0 && nv <= (1 << 20) ? (float *)malloc((size_t)nv * 3 * sizeof(float)) : NULL;
        for (int i = 0; i < 3; i++)
            tok[i] = tok[i] % nv;
        if (logits) {
            (void)llm_decode(c, 0, tok, 2, 0, logits, 1);
            (void)llm_decode(c, 0, tok + 2, 1, 2, logits, 0);
            free(logits);
        }
        llm_context_free(c);
    }
    llm_model_close(m);
    return 0;
}
