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
#include <string.h>
#include <unistd.h>

#include "../../lib/llm.h"

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

/* A shared data model opened with n_threads, or NULL when the file is
 * absent (the caller skips); a file that is there must open. */
static inline struct llm_model *llm_test_model(const char *rel, int n_threads)
{
    const char *p = llm_test_data(rel);
    if (!p)
        return NULL;
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = n_threads;
    llm_status s = llm_model_open(&m, p, &mp);
    cr_assert_eq(s, LLM_OK, "%s: %s", rel, llm_error_detail(s));
    return m;
}

/* Multiply every f32 weight matrix (and 3-D expert tensor) of f by k, so that a random-weight model
 * is far from linear: attention sharp, logits spread (0.02-std weights make
 * every model nearly linear and every greedy choice a near tie). */
static inline void llm_test_scale_weights(struct llm_file *f, float k)
{
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *t = &f->tensors[i];
        if (t->type != LLM_TYPE_F32 || t->n_dims < 2) /* matrices, and experts' (3-D) */
            continue;
        const void *d;
        cr_assert_eq(llm_tensor_bytes(f, t, &d), LLM_OK);
        float *w = malloc(t->nbytes);
        cr_assert(w);
        memcpy(w, d, t->nbytes);
        for (uint64_t j = 0; j < t->nbytes / 4; j++)
            w[j] *= k;
        cr_assert_eq(llm_file_own(f, w), LLM_OK);
        t->data = w;
        t->fill = NULL;
    }
}

#endif
