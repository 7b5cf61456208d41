/* kern.c: the generic instance of GPTQ's inner loops and the choice of
 * instance (kern.h). */
#include "kern.h"

#include <stdlib.h>
#include <string.h>

#define KERN(name) name##_generic
#define KERN_NAME "generic"
#include "kern_impl.h"

const struct llm_qkern *llm_qkern_get(void)
{
#if defined(__x86_64__) || defined(__i386__)
    static const struct llm_qkern *_Atomic chosen;
    const struct llm_qkern *k = chosen;
    if (!k) {
        const char *e = getenv("LLM_ISA");
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx2") && !(e && (!strcmp(e, "scalar") || !strcmp(e, "ref")))
                ? &llm_qkern_avx2
                : &llm_qkern_generic;
        chosen = k;
    }
    return k;
#else
    return &llm_qkern_generic;
#endif
}
