/* status.c: status texts and the thread-local error detail. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char detail[1024];

const char *llm_strerror(llm_status s)
{
    switch (s) {
    case LLM_OK: return "success";
    case LLM_E_NOMEM: return "out of memory";
    case LLM_E_IO: return "input/output error";
    case LLM_E_FORMAT: return "malformed input";
    case LLM_E_UNSUPPORTED: return "unsupported feature";
    case LLM_E_INVALID: return "invalid argument";
    case LLM_E_NOTFOUND: return "not found";
    case LLM_E_CHECKSUM: return "checksum mismatch";
    case LLM_E_CUDA: return "CUDA error";
    case LLM_E_INTERRUPTED: return "interrupted";
    case LLM_E_KV_FULL: return "KV cache full";
    }
    return "unknown error";
}

llm_status llm_error_set(llm_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return s;
}

void llm_error_prefix(const char *prefix)
{
    char tmp[sizeof detail];
    size_t n = strlen(prefix), d = strlen(detail);
    if (n + 2 >= sizeof tmp)
        return;
    memcpy(tmp, prefix, n);
    memcpy(tmp + n, ": ", 2);
    if (d > sizeof tmp - n - 3)
        d = sizeof tmp - n - 3; /* truncate the old detail, keep the prefix */
    memcpy(tmp + n + 2, detail, d);
    tmp[n + 2 + d] = 0;
    memcpy(detail, tmp, sizeof detail);
}

const char *llm_error_detail(llm_status s)
{
    return detail[0] ? detail : llm_strerror(s);
}

void llm_error_clear(void)
{
    detail[0] = 0;
}
