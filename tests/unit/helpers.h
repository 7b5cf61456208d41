/* helpers.h: shared bits of the Criterion unit tests.
 *
 * Real-data tests read ../shared/data (or $LLM_DATA). When a file is absent
 * the test is skipped with a message, never passed: use TEST_DATA(var, rel).
 */
#ifndef LLM_TESTS_HELPERS_H
#define LLM_TESTS_HELPERS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Path of a shared data file, or NULL when it is not there. */
static inline const char *llm_test_data(const char *rel)
{
    static _Thread_local char buf[4][4096];
    static _Thread_local int k;
    const char *root = getenv("LLM_DATA");
    char *p = buf[k++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", root && *root ? root : "../shared/data", rel);
    return access(p, R_OK) == 0 ? p : NULL;
}

#define TEST_DATA(var, rel)                                                   \
    const char *var = llm_test_data(rel);                                     \
    if (!var) {                                                               \
        cr_skip_test("test data %s is absent (set LLM_DATA or provide ../shared/data)", rel); \
        return;                                                               \
    }

/* A fresh scratch directory for one test (removed by the OS's tmp cleaning;
 * tests keep their files small). */
static inline const char *llm_test_tmpdir(void)
{
    static _Thread_local char dir[256];
    snprintf(dir, sizeof dir, "%s/llm-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        cr_assert_fail("mkdtemp failed");
    return dir;
}

#endif
