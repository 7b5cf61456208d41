/* fuzz_head.c: the checks of a model's first bytes, made when the model is
 * not a regular file (a pipe, a device) and is copied before it is parsed
 * (lib/format/head.c). The input is fed to llm_model_head_check as the spool
 * feeds it, a head growing from one byte to what the check asks for, which
 * reaches every "need more" path.
 *
 * Besides surviving any input, the check must not refuse what the parsers
 * accept: when the whole input parses as a model, the check accepts it, and
 * the size it gives (if any) leaves room for the input (the spool would
 * refuse more than LLM_MAP_SLACK bytes after it). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/common/io.h"
#include "../../lib/format/import.h"

/* What the spool would decide: LLM_OK and the size, or an error. */
static llm_status spool_check(const uint8_t *data, size_t size, uint64_t *total)
{
    size_t n = size < 1 ? size : 1;
    uint64_t need;
    *total = 0;
    for (int rounds = 0; rounds < 64; rounds++) {
        int eof = n == size;
        need = 0;
        llm_status s = llm_model_head_check(data, n, eof, &need, total, (void *)"fuzz");
        if (s)
            return s;
        if (need <= n)
            return LLM_OK;
        if (eof)
            return LLM_E_FORMAT; /* the spool: "truncated" */
        if (need > LLM_MAP_HEAD_MAX)
            return LLM_E_FORMAT;
        size_t want = n * 2 > need ? n * 2 : (size_t)need;
        n = want < size ? want : size;
    }
    abort(); /* the head must be decided in O(log n) rounds */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t total;
    llm_status s = spool_check(data, size, &total);
    /* the parsers, as llm_import picks them */
    struct llm_import_opts o;
    llm_import_opts_default(&o);
    o.nonfinite = LLM_FINITE_IGNORE;
    struct llm_file *f = NULL;
    llm_status p;
    if (size >= 8 && memcmp(data, "\x89LLM\r\n\x1a\n", 8) == 0)
        p = llm_llm_parse(&f, data, size, "fuzz", &o);
    else if (size >= 4 && memcmp(data, "GGUF", 4) == 0)
        p = llm_gguf_parse(&f, data, size, "fuzz", &o);
    else if (size >= 9 && data[8] == '{')
        p = llm_safetensors_parse(&f, data, size, "fuzz", &o);
    else if (size >= 28 || (size >= 4 && memcmp(data, "24ka", 4) == 0)) /* 0x616b3432 */
        p = llm_llama2c_parse(&f, data, size, "fuzz", &o);
    else
        p = LLM_E_FORMAT;
    llm_file_free(f);
    if (p == LLM_OK) {
        if (s != LLM_OK)
            abort(); /* a model the parser reads was refused as a stream */
        if (total && size > total + LLM_MAP_SLACK)
            abort(); /* the spool would refuse it too */
    }
    return 0;
}
