/* alloc.c: checked allocation. */
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

void *llm_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        llm_error_set(LLM_E_NOMEM, "out of memory (%zu bytes)", n);
    return p;
}

void *llm_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        llm_error_set(LLM_E_NOMEM, "out of memory (%zu x %zu bytes)", count, size);
    return p;
}

void *llm_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        llm_error_set(LLM_E_NOMEM, "out of memory (%zu bytes)", n);
    return q;
}

void llm_free(void *p)
{
    free(p);
}

char *llm_strndup(const char *s, size_t n)
{
    char *d = llm_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

char *llm_strdup(const char *s)
{
    return llm_strndup(s, strlen(s));
}

llm_status llm_grow(void **items, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return LLM_OK;
    size_t n = *cap ? *cap : 8;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return llm_error_set(LLM_E_NOMEM, "out of memory (array of %zu)", need);
        n *= 2;
    }
    uint64_t bytes;
    if (!llm_mul_ok(n, size, &bytes) || bytes > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "out of memory (array of %zu)", need);
    void *p = llm_realloc(*items, (size_t)bytes);
    if (!p)
        return LLM_E_NOMEM;
    *items = p;
    *cap = n;
    return LLM_OK;
}
