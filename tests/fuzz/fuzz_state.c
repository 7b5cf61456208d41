/* fuzz_state.c: the KV state file reader (kv/state.h), header to end mark,
 * with its checksums skipped (LLM_FUZZING) so that mutations reach the
 * records and the zstd frames behind them. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../lib/common/alloc.h"
#include "../../lib/kv/state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        return 0;
    struct llm_state_reader *r;
    struct llm_state_info in;
    if (llm_state_open_stream(&r, f, "fuzz.kv", 1, &in))
        return 0;
    /* the header's claims are bounded, but a fuzzer may claim the largest
     * vocabulary: keep the run's memory to what libFuzzer allows */
    if ((uint64_t)in.n_tokens * 4 + (uint64_t)in.n_vocab * 4 < ((uint64_t)256 << 20)) {
        int32_t *toks = llm_malloc((size_t)in.n_tokens * sizeof(int32_t));
        float *lg = llm_malloc((size_t)in.n_vocab * sizeof(float));
        if (toks && lg && !llm_state_read_tokens(r, toks, lg))
            llm_state_read_rows(r, NULL, NULL);
        llm_free(toks);
        llm_free(lg);
    }
    llm_state_close(r);
    return 0;
}
