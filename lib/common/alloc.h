/* alloc.h: the only place that calls malloc. Sizes are overflow-checked, and
 * a failure records a detail, so callers just forward LLM_E_NOMEM. */
#ifndef LLM_COMMON_ALLOC_H
#define LLM_COMMON_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

void *llm_malloc(size_t n);              /* NULL (and a detail) on failure */
void *llm_calloc(size_t count, size_t size);
void *llm_realloc(void *p, size_t n);
void llm_free(void *p);
char *llm_strdup(const char *s);
char *llm_strndup(const char *s, size_t n);

/* Grow *items (each `size` bytes) so that it can hold `need` entries. */
llm_status llm_grow(void **items, size_t *cap, size_t need, size_t size);

/* a*b and a+b with overflow detection: return 0 on overflow. */
static inline int llm_mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline int llm_add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline uint64_t llm_align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

#endif
