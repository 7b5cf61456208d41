/* bytes.h: little-endian fields of the files we write (the machines we run
 * on are little-endian: the bytes are copied as they are), and the
 * checksum test that fuzz builds skip. */
#ifndef LLM_COMMON_BYTES_H
#define LLM_COMMON_BYTES_H

#include <stdint.h>
#include <string.h>

static inline void llm_put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void llm_put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint32_t llm_get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t llm_get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Does a stored checksum match? Always, in fuzz builds (LLM_FUZZING), so
 * that mutations reach what is behind the checksums. */
static inline int llm_sum_ok(uint64_t got, uint64_t want)
{
#ifdef LLM_FUZZING
    (void)got, (void)want;
    return 1;
#else
    return got == want;
#endif
}

#endif
