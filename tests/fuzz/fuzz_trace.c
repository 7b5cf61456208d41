/* fuzz_trace.c: the KV trace reader of llm-kvstat --trace: anything is a
 * trace or an error, and a trace can be summarized and drawn. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../lib/serve/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_trace tr;
    if (llm_trace_parse(&tr, (const char *)data, size, "fuzz.jsonl") != LLM_OK)
        return 0;
    struct llm_trace_summary s;
    llm_trace_summarize(&tr, &s);
    FILE *f = fopen("/dev/null", "w");
    if (f) {
        llm_trace_chart(f, &tr, 40, 5);
        fclose(f);
    }
    llm_trace_free(&tr);
    return 0;
}
