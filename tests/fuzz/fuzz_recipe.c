/* fuzz_recipe.c: the llm-quantize recipe parser, and resolving tensor names
 * through whatever it accepted (every accepted spec must give a type or a
 * clean error, never crash). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../lib/quantize/quantize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_recipe *r = NULL;
    if (llm_recipe_parse(&r, (const char *)data, size, "fuzz.yaml") != LLM_OK) {
        if (r)
            abort(); /* a failed parse returns nothing */
        return 0;
    }
    static const char *const names[] = { "blk.0.attn_q.weight", "blk.11.ffn_down.weight",
                                         "output.weight", "token_embd.weight", "" };
    struct llm_qspec def, s;
    llm_qspec_default(&def);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int line;
        enum llm_type t;
        llm_recipe_resolve(r, &def, names[i], &s, &line);
        if (line < 0)
            abort();
        (void)llm_qspec_type(&s, LLM_TYPE_F32, &t);
    }
    llm_recipe_free(r);
    return 0;
}
