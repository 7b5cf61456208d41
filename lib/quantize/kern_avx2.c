/* kern_avx2.c: the AVX2 instance of GPTQ's inner loops (kern_impl.h). Only
 * AVX2 is enabled, not FMA, so that the products and sums round as in the
 * generic instance. */
#if defined(__x86_64__) || defined(__i386__)
#include "kern.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC target("avx2")
#endif

#define KERN(name) name##_avx2
#define KERN_NAME "avx2"
#include "kern_impl.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else
typedef int llm_kern_avx2_unused; /* ISO C wants at least one declaration */
#endif
