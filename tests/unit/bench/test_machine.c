/* test_machine.c: the machine header and the roofline probes. Speed is never
 * asserted; the probes must return figures within physical bounds and
 * refuse bad arguments. */
#include <string.h>

#include "../../../lib/bench/bench.h"
#include "../helpers.h"

Test(machine, detect)
{
    struct llm_machine m;
    llm_machine_detect(&m);
    cr_assert(m.cpu[0] && m.features[0] && m.commit[0] && m.version[0]);
    cr_assert_geq(m.n_cpus, 1);
#if defined(__x86_64__)
    __builtin_cpu_init();
    cr_assert_eq(strstr(m.features, "avx2") != NULL, __builtin_cpu_supports("avx2") != 0, "%s", m.features);
    cr_assert_eq(strstr(m.features, "avx512f") != NULL, __builtin_cpu_supports("avx512f") != 0, "%s",
                 m.features);
#endif
}

Test(machine, bandwidth_probe)
{
    double g = -1;
    cr_assert_eq(llm_probe_bandwidth(&g, 1, 16u << 20, 2), LLM_OK, "%s", llm_error_detail(-1));
    /* more than a floppy disk, less than any memory system built */
    cr_assert(g > 0.05 && g < 20000, "%g GB/s", g);
    cr_assert_eq(llm_probe_bandwidth(&g, 2, 8u << 20, 3), LLM_OK);
    cr_assert(g > 0.05 && g < 20000, "%g GB/s", g);
    cr_assert_eq(llm_probe_bandwidth(&g, 0, 1u << 20, 1), LLM_E_INVALID);
    cr_assert_eq(llm_probe_bandwidth(&g, 1, 100, 1), LLM_E_INVALID);
    /* a buffer that does not divide evenly among the threads, nor into vectors */
    cr_assert_eq(llm_probe_bandwidth(&g, 3, (1u << 20) + 8 * 13, 1), LLM_OK);
    cr_assert(g > 0.05 && g < 20000, "%g GB/s", g);
    /* the default buffer: past the caches, within bounds */
    const size_t b = llm_probe_bandwidth_bytes();
    cr_assert(b >= (64u << 20) && b <= ((size_t)2 << 30), "%zu bytes", b);
}

Test(machine, fma_probe)
{
    double g = -1;
    cr_assert_eq(llm_probe_fma(&g, 1, 0.05), LLM_OK);
    /* a core does at most a few hundred GFLOP/s in fp32 */
    cr_assert(g > 0.01 && g < 5000, "%g GFLOP/s", g);
    cr_assert_eq(llm_probe_fma(&g, 1, 0), LLM_E_INVALID);
    cr_assert_eq(llm_probe_fma(&g, 1000, 0.1), LLM_E_INVALID);
}
