/* status.h: status codes and the error-detail buffer.
 *
 * Every fallible lib/ function returns an llm_status: LLM_OK (0) or a negative
 * code. The function that detects a failure also records a one-line detail with
 * llm_error_set(), naming the file and what is wrong in it
 * ("m.gguf: tensor 'blk.0.attn_q.weight': offset past end of file"); cmd/
 * prints it after the program name. lib/ never prints and never exits.
 */
#ifndef LLM_COMMON_STATUS_H
#define LLM_COMMON_STATUS_H

#include <stddef.h>

typedef int llm_status;

enum {
    LLM_OK = 0,
    LLM_E_NOMEM = -1,       /* an allocation failed or a size would overflow */
    LLM_E_IO = -2,          /* open/read/write/mmap failed (errno in the detail) */
    LLM_E_FORMAT = -3,      /* input is malformed: bad magic, offsets, shapes, keys */
    LLM_E_UNSUPPORTED = -4, /* well-formed, but a feature we do not implement */
    LLM_E_INVALID = -5,     /* a bad argument from the caller or the user */
    LLM_E_NOTFOUND = -6,    /* a key, tensor or file that is not there */
    LLM_E_CHECKSUM = -7,    /* stored data does not match its checksum */
    LLM_E_CUDA = -8,        /* a CUDA runtime call failed, or no device */
    LLM_E_INTERRUPTED = -9, /* stopped by a signal */
    LLM_E_KV_FULL = -10,    /* the KV cache has no free block: free or preempt a sequence */
};

const char *llm_strerror(llm_status s);

/* Record a detail message for the current thread and return `s`, so that
 * `return llm_error_set(LLM_E_FORMAT, "%s: bad magic", path);` reads well. */
llm_status llm_error_set(llm_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefix the current detail with "prefix: " (used to add a file name to an
 * error raised by a lower layer that did not know it). */
void llm_error_prefix(const char *prefix);

/* The detail of the last error on this thread, or the llm_strerror() text of
 * `s` when no detail was recorded. Never NULL. */
const char *llm_error_detail(llm_status s);

/* Forget the current detail. */
void llm_error_clear(void);

/* LLM_TRY(expr): return the status of expr when it fails. */
#define LLM_TRY(expr)                    \
    do {                                 \
        llm_status llm_try_s_ = (expr);  \
        if (llm_try_s_ != LLM_OK)        \
            return llm_try_s_;           \
    } while (0)

/* LLM_CHECK(cond, status, fmt, ...): fail with a detail when cond is false. */
#define LLM_CHECK(cond, status, ...)                  \
    do {                                              \
        if (!(cond))                                  \
            return llm_error_set((status), __VA_ARGS__); \
    } while (0)

#endif
