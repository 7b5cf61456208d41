/* test_io.c: mappings (files, empty files, pipes) and atomic writers. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
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

Test(io, read_file_limit_names_the_size)
{
    char p[512];
    snprintf(p, sizeof p, "%s/big", llm_test_tmpdir());
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, 3900000), 0);
    close(fd);
    char *buf;
    size_t n;
    llm_status s = llm_read_file(p, 1 << 20, &buf, &n);
    cr_assert_eq(s, LLM_E_FORMAT);
    /* it said "0 bytes": the size was read after the mapping was closed */
    cr_assert(strstr(llm_error_detail(s), "file too large (3900000 bytes, limit 1048576)"), "%s",
              llm_error_detail(s));
}

/* Feed `n` bytes of `byte` into the write end of a pipe from a child. */
static pid_t feed(int fd_w, int fd_r, size_t n, int byte)
{
    pid_t pid = fork();
    if (pid == 0) {
        close(fd_r);
        char buf[4096];
        memset(buf, byte, sizeof buf);
        while (n) {
            size_t k = n < sizeof buf ? n : sizeof buf;
            if (write(fd_w, buf, k) != (ssize_t)k)
                _exit(0); /* the reader stopped: fine */
            n -= k;
        }
        _exit(0);
    }
    close(fd_w);
    return pid;
}

/* llm_read_file on standard input connected to a pipe of n bytes. */
static llm_status read_pipe(size_t n, int byte, size_t max, int text, size_t *len)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = feed(fds[1], fds[0], n, byte);
    int saved = dup(0);
    dup2(fds[0], 0);
    close(fds[0]);
    char *buf = NULL;
    llm_status s = text ? llm_read_text("-", max, &buf, len) : llm_read_file("-", max, &buf, len);
    dup2(saved, 0);
    close(saved);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    llm_free(buf);
    return s;
}

Test(io, read_file_of_a_pipe_stops_at_the_limit)
{
    size_t len = 0;
    cr_assert_eq(read_pipe(100000, 'a', 100000, 0, &len), LLM_OK);
    cr_assert_eq(len, 100000);
    /* a stream with no end is read up to the limit, then refused */
    llm_status s = read_pipe((size_t)1 << 40, 'a', 100000, 0, &len);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "<stdin>: more than 100000 bytes"), "%s",
              llm_error_detail(s));
}

Test(io, read_text_refuses_a_nul_byte)
{
    size_t len;
    llm_status s = read_pipe((size_t)1 << 40, 0, 1 << 30, 1, &len);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "<stdin>: not text (a NUL byte at offset 0)"), "%s",
              llm_error_detail(s));
    cr_assert_eq(read_pipe(5000, 'x', 1 << 30, 1, &len), LLM_OK);
    cr_assert_eq(len, 5000);
}

/* A check of the head that wants 10 bytes, refuses a head that does not
 * start with "HEAD", and gives the size in bytes 4..9 as decimal digits. */
static llm_status head_check(const uint8_t *h, size_t n, int eof, uint64_t *need, uint64_t *size,
                             void *ctx)
{
    (*(int *)ctx)++;
    if (n < 10) {
        *need = 10;
        return eof ? llm_error_set(LLM_E_FORMAT, "short") : LLM_OK;
    }
    if (memcmp(h, "HEAD", 4) != 0)
        return llm_error_set(LLM_E_FORMAT, "<stdin>: bad head");
    char digits[7] = { 0 };
    memcpy(digits, h + 4, 6);
    *size = strtoull(digits, NULL, 10);
    return LLM_OK;
}

/* llm_map_open_checked on standard input fed with `head`, then `n` bytes
 * of `byte`. */
static llm_status map_pipe(const char *head, size_t n, int byte, struct llm_map *m, int *calls)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(write(fds[1], head, strlen(head)), (ssize_t)strlen(head));
    pid_t pid = feed(fds[1], fds[0], n, byte);
    int saved = dup(0);
    dup2(fds[0], 0);
    close(fds[0]);
    struct llm_map_check c = { head_check, calls, 0 };
    llm_status s = llm_map_open_checked(m, "-", &c);
    dup2(saved, 0);
    close(saved);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return s;
}

Test(io, spool_checks_the_head_first)
{
    struct llm_map m;
    int calls = 0;
    /* an endless stream of a bad head stops at once */
    llm_status s = map_pipe("JUNK000000", (size_t)1 << 40, 0, &m, &calls);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "bad head"), "%s", llm_error_detail(s));
    cr_assert_eq(calls, 1);
    /* a good head: copied up to the size it gives */
    calls = 0;
    cr_assert_eq(map_pipe("HEAD065536", 65536 - 10, 'z', &m, &calls), LLM_OK);
    cr_assert_eq(m.size, 65536);
    cr_assert_eq(m.data[65535], 'z');
    llm_map_close(&m);
    /* ... and an endless one past it is refused, not copied to the end */
    s = map_pipe("HEAD065536", (size_t)1 << 40, 'z', &m, &calls);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "<stdin>: the input goes on past the 65536 bytes"), "%s",
              llm_error_detail(s));
}

static void write_file(const char *path, const char *text)
{
    struct llm_out o;
    llm_status s = llm_out_open(&o, path);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    cr_assert_eq(llm_out_write(&o, text, strlen(text)), LLM_OK);
    s = llm_out_commit(&o);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
}

static int file_is(const char *path, const char *text)
{
    char *buf;
    size_t n;
    if (llm_read_file(path, 1 << 20, &buf, &n))
        return 0;
    int eq = n == strlen(text) && memcmp(buf, text, n) == 0;
    llm_free(buf);
    return eq;
}

Test(io, write_through_a_symlink_keeps_the_link)
{
    char dir[256], target[512], link[512], rel[512];
    snprintf(dir, sizeof dir, "%s", llm_test_tmpdir());
    snprintf(target, sizeof target, "%s/target", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    write_file(target, "old");
    cr_assert_eq(chmod(target, 0640), 0);
    cr_assert_eq(symlink(target, link), 0);
    write_file(link, "new");
    struct stat st;
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the link was replaced by a file");
    cr_assert(file_is(target, "new"), "the target was not written");
    cr_assert_eq(stat(target, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0640, "a replaced file keeps its permissions");
    /* a relative link, and a dangling one: the file it names is created */
    snprintf(rel, sizeof rel, "%s/rel", dir);
    cr_assert_eq(symlink("made", rel), 0);
    write_file(rel, "made through a dangling link");
    cr_assert_eq(lstat(rel, &st), 0);
    cr_assert(S_ISLNK(st.st_mode));
    snprintf(target, sizeof target, "%s/made", dir);
    cr_assert(file_is(target, "made through a dangling link"));
}

Test(io, write_into_a_fifo_in_place)
{
    char dir[256], fifo[512], copy[512];
    snprintf(dir, sizeof dir, "%s", llm_test_tmpdir());
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(copy, sizeof copy, "%s/copy", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    pid_t pid = fork();
    if (pid == 0) { /* the reader: the FIFO's bytes into a file */
        int in = open(fifo, O_RDONLY), out = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        char buf[4096];
        ssize_t k;
        while (in >= 0 && out >= 0 && (k = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)k) != k)
                _exit(1);
        _exit(0);
    }
    write_file(fifo, "through the fifo");
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    struct stat st;
    cr_assert_eq(lstat(fifo, &st), 0);
    cr_assert(S_ISFIFO(st.st_mode), "the FIFO was replaced by a file");
    cr_assert(file_is(copy, "through the fifo"));
}

Test(io, write_into_a_character_device_in_place)
{
    char dir[256], dev[512];
    snprintf(dir, sizeof dir, "%s", llm_test_tmpdir());
    snprintf(dev, sizeof dev, "%s/null", dir);
    /* a twin of /dev/null (1, 3): an old build renamed its file over it */
    if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) != 0)
        cr_skip_test("cannot make a device node here (needs CAP_MKNOD)");
    write_file(dev, "into the device");
    struct stat st;
    cr_assert_eq(lstat(dev, &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "the device was replaced by a file");
    cr_assert_eq(st.st_rdev, makedev(1, 3));
}

Test(io, stale_temporaries_are_removed)
{
    char dir[256], p[512];
    snprintf(dir, sizeof dir, "%s", llm_test_tmpdir());
    const char *names[] = { ".m.llm.tmp-AbC123", ".n.llm.tmp-xyz789", "m.llm.tmp-AbC124",
                            ".m.llm.tmp-AbC12", ".other" };
    const int old[] = { 1, 0, 1, 1, 1 };
    const int removed[] = { 1, 0, 0, 0, 0 };
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        int fd = open(p, O_WRONLY | O_CREAT, 0600);
        cr_assert(fd >= 0);
        close(fd);
        if (old[i]) { /* older than a day */
            struct timespec ts[2] = { { time(NULL) - LLM_OUT_STALE_S - 60, 0 },
                                      { time(NULL) - LLM_OUT_STALE_S - 60, 0 } };
            cr_assert_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
        }
    }
    snprintf(p, sizeof p, "%s/out.llm", dir);
    write_file(p, "x");
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        cr_assert_eq(access(p, F_OK) != 0, removed[i], "%s: %s", names[i],
                     removed[i] ? "a stale temporary of ours was kept" : "removed, but not ours or not stale");
    }
}
