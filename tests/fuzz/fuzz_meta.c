/* fuzz_meta.c: the YAML metadata parser, and emit -> parse of what it read
 * (what is read must be writable and read back the same way). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/common/alloc.h"
#include "../../lib/format/meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_meta *m = NULL;
    if (llm_meta_parse_yaml(&m, (const char *)data, size, "fuzz.yaml") != LLM_OK)
        return 0;
    char *y;
    size_t n;
    if (llm_meta_emit_yaml(m, &y, &n) == LLM_OK) {
        struct llm_meta *b = NULL;
        if (llm_meta_parse_yaml(&b, y, n, "re.yaml") != LLM_OK)
            abort(); /* our own output must parse */
        llm_meta_free(b);
        llm_free(y);
    }
    llm_meta_free(m);
    return 0;
}
