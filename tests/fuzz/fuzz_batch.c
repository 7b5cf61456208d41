/* fuzz_batch.c: one line of a batch file (llm-run --batch): the reader
 * must answer anything with a request or an error, and the output line of
 * either must be one line of valid JSON whose key --resume reads back. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/common/alloc.h"
#include "../../lib/serve/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct llm_req_defaults d = { .max_tokens = -1 };
    llm_sampler_params_default(&d.sp);
    struct llm_request r;
    if (llm_request_parse(&r, (const char *)data, size, 3, &d) != LLM_OK) {
        llm_request_free(&r);
        return 0;
    }
    if (r.err_code && (!r.err_msg || strpbrk(r.err_msg, "\n\r")))
        abort(); /* an error has a message of one line */
    r.logprobs = 0; /* no tokenizer here */
    /* the input bytes as a choice's text: any bytes must come out as JSON */
    struct llm_choice_out ch = { .text = (const char *)data, .len = size,
                                 .finish_reason = "length", .n_tokens = 1 };
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        abort();
    llm_request_write_output(f, &r, "m", 0, &ch, 1, 1, NULL);
    fclose(f);
    if (!len || out[len - 1] != '\n' || memchr(out, '\n', len - 1))
        abort();
    json_error_t je;
    json_t *j = json_loadb(out, len, JSON_ALLOW_NUL, &je); /* \u0000 is JSON */
    if (!j)
        abort();
    json_decref(j);
    int64_t line;
    char *cid;
    if (llm_request_output_key(out, len, &line, &cid) != LLM_OK || line != 3)
        abort();
    if ((cid == NULL) != (r.custom_id == NULL) || (cid && strcmp(cid, r.custom_id)))
        abort();
    llm_free(cid);
    free(out);
    llm_request_free(&r);
    return 0;
}
