/* fuzz_handoff.c: the reader of the prefill-to-decode stream
 * (serve/handoff.h), header to end mark, with its checksums skipped
 * (LLM_FUZZING) so that mutations reach the items behind them. The states
 * inside are kv/state.h's, which fuzz_state reads. */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../lib/serve/handoff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz.llms", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return 0;
    }
    struct llm_handoff_reader *r;
    uint64_t id;
    uint32_t types;
    const int64_t *lines;
    size_t n;
    if (!llm_handoff_open(&r, fd, "fuzz.llms", &id, &types, &lines, &n)) {
        for (;;) { /* read in this thread: llm_handoff_start is not called */
            struct llm_handoff_item it;
            int got;
            if (llm_handoff_next(r, 0, &it, &got) || got != 1)
                break;
            llm_handoff_item_free(&it);
        }
        llm_handoff_close(r);
    }
    close(fd);
    return 0;
}
