/* test_io.c: mappings (files, empty files, pipes) and atomic writers. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/io.h"
#include "../helpers.h"

Test(io, map_file_and_empty_file)
{
    char p[512];
    snprintf(p, sizeof p, "%s/a", llm_test_tmpdir());
    struct llm_out o;
    cr_assert_eq(llm_out_open(&o, p), LLM_OK);
    cr_assert_eq(llm_out_write(&o, "hello", 5), LLM_OK);
    cr_assert_eq(llm_out_pad(&o, 64), LLM_OK);
    cr_assert_eq(o.pos, 64);
    cr_assert_eq(llm_out_commit(&o), LLM_OK);
    struct llm_map m;
    cr_assert_eq(llm_map_open(&m, p), LLM_OK);
    cr_assert_eq(m.size, 64);
    cr_assert_eq(memcmp(m.data, "hello\0\0", 7), 0);
    llm_map_close(&m);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_neq(st.st_mode & 0044, 0, "final file gets the usual permissions, not 0600");

    snprintf(p, sizeof p, "%s/empty", llm_test_tmpdir());
    cr_assert_eq(llm_out_open(&o, p), LLM_OK);
    cr_assert_eq(llm_out_commit(&o), LLM_OK);
    cr_assert_eq(llm_map_open(&m, p), LLM_OK);
    cr_assert_eq(m.size, 0);
    llm_map_close(&m);
}

Test(io, missing_file_names_it)
{
    struct llm_map m;
    llm_status s = llm_map_open(&m, "/nonexistent/x.llm");
    cr_assert_eq(s, LLM_E_IO);
    cr_assert(strstr(llm_error_detail(s), "/nonexistent/x.llm: cannot open"), "%s", llm_error_detail(s));
}

Test(io, pipe_is_spooled)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        char buf[4096];
        for (int i = 0; i < 300; i++) { /* 1.2 MB: more than a pipe buffer */
            memset(buf, 'a' + i % 26, sizeof buf);
            if (write(fds[1], buf, sizeof buf) != (ssize_t)sizeof buf)
                _exit(1);
        }
        _exit(0);
    }
    close(fds[1]);
    int saved = dup(0);
    dup2(fds[0], 0);
    close(fds[0]);
    struct llm_map m;
    llm_status s = llm_map_open(&m, "-");
    dup2(saved, 0);
    close(saved);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    cr_assert_eq(m.size, 300 * 4096);
    cr_assert_eq(m.data[4096 * 299], 'a' + 299 % 26);
    llm_map_close(&m);
}

Test(io, abort_removes_the_temporary)
{
    char dir[256], p[512];
    snprintf(dir, sizeof dir, "%s", llm_test_tmpdir());
    snprintf(p, sizeof p, "%s/out", dir);
    struct llm_out o;
    cr_assert_eq(llm_out_open(&o, p), LLM_OK);
    cr_assert_eq(llm_out_write(&o, "x", 1), LLM_OK);
    cr_assert_eq(access(p, F_OK), -1, "the target must not exist before commit");
    llm_out_abort(&o);
    cr_assert_eq(access(p, F_OK), -1);
    cr_assert_eq(rmdir(dir), 0, "the directory is empty again");
}

Test(io, read_file_limit)
{
    char p[512];
    snprintf(p, sizeof p, "%s/big", llm_test_tmpdir());
    struct llm_out o;
    cr_assert_eq(llm_out_open(&o, p), LLM_OK);
    cr_assert_eq(llm_out_zeros(&o, 1000), LLM_OK);
    cr_assert_eq(llm_out_commit(&o), LLM_OK);
    char *buf;
    size_t n;
    cr_assert_eq(llm_read_file(p, 999, &buf, &n), LLM_E_FORMAT);
    cr_assert_eq(llm_read_file(p, 1000, &buf, &n), LLM_OK);
    cr_assert_eq(n, 1000);
    llm_free(buf);
}
