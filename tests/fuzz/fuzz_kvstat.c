/* fuzz_kvstat.c: the parsers of llm-kvstat (config.json, lengths files) and
 * the arithmetic on whatever they accept. The first byte picks the parser. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../lib/common/alloc.h"
#include "../../lib/kv/kvstat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct llm_kvstat_shape s;
    struct llm_kvstat_params p;
    struct llm_kvstat_report r;
    llm_kvstat_params_default(&p);
    if (data[0] & 1) {
        uint64_t *v;
        size_t n;
        if (llm_kvstat_lengths_parse(&v, &n, text, len, "fuzz.txt", 4096) != LLM_OK)
            return 0;
        llm_kvstat_preset(&s, "llama-2-7b");
        p.ctx = 4096;
        p.mem = 1ull << 36;
        p.block_size = 1 + data[0] % 64;
        if (llm_kvstat_compute(&r, &s, &p, v, n) != LLM_OK)
            __builtin_trap(); /* every accepted length fits the context */
        llm_free(v);
        return 0;
    }
    if (llm_kvstat_shape_from_config(&s, text, len, "fuzz.json") != LLM_OK)
        return 0;
    p.mem = 1ull << 40;
    if (llm_kvstat_compute(&r, &s, &p, NULL, 0) == LLM_OK) {
        FILE *f = fopen("/dev/null", "w");
        llm_kvstat_print_table(f, &r);
        llm_kvstat_print_json(f, &r);
        fclose(f);
    }
    return 0;
}
