/* io.c: mappings, spooling of pipes, atomic writers. */
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"

#define OUT_BUF_SIZE (1u << 20)

/* ------------------------------------------------------------------------ */
/* reading */

static const char *shown(const char *path)
{
    return strcmp(path, "-") == 0 ? "<stdin>" : path;
}

/* Copy a non-seekable input to an unlinked temporary file; return its fd.
 * With a check, the head is read into memory and checked first, and the
 * copy stops at the size it gives (see llm_map_check_fn). */
static llm_status spool(int fd, const char *path, const struct llm_map_check *c, int *out)
{
    static uint8_t buf[1 << 16];
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    uint8_t *head = NULL;
    size_t n = 0;
    uint64_t size = 0, max = c ? c->max : 0;
    int eof = 0;
    llm_status s = LLM_OK;
    if (c && c->fn) {
        uint64_t need = 4096;
        for (;;) {
            if (need > n && !eof) {
                if (need > LLM_MAP_HEAD_MAX)
                    return llm_error_set(LLM_E_FORMAT, "%s: its header would need more than "
                                         "%zu MiB (not a model file?)", shown(path),
                                         LLM_MAP_HEAD_MAX >> 20);
                /* at least double, so that a check that walks the head from
                 * its start is called O(log n) times */
                size_t want = n * 2 > need ? n * 2 : (size_t)need;
                if (want > LLM_MAP_HEAD_MAX)
                    want = LLM_MAP_HEAD_MAX;
                uint8_t *h = llm_realloc(head, want);
                if (!h) {
                    llm_free(head);
                    return LLM_E_NOMEM;
                }
                head = h;
                while (n < want && !eof) {
                    ssize_t r = read(fd, head + n, want - n);
                    if (r < 0 && errno == EINTR)
                        continue;
                    if (r < 0) {
                        s = llm_error_set(LLM_E_IO, "%s: read error: %s", shown(path),
                                          strerror(errno));
                        llm_free(head);
                        return s;
                    }
                    eof = r == 0;
                    n += (size_t)r;
                }
            }
            need = 0;
            if ((s = c->fn(head, n, eof, &need, &size, c->ctx))) {
                llm_free(head);
                return s;
            }
            if (need <= n)
                break;
            if (eof) {
                llm_free(head);
                return llm_error_set(LLM_E_FORMAT, "%s: truncated (%zu bytes)", shown(path), n);
            }
        }
    }
    char tmpl[4096];
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/llm-spool-XXXXXX", dir) >= sizeof tmpl) {
        llm_free(head);
        return llm_error_set(LLM_E_IO, "TMPDIR is too long");
    }
    int t = mkstemp(tmpl);
    if (t < 0) {
        s = llm_error_set(LLM_E_IO, "%s: cannot create a temporary file in %s: %s", shown(path),
                          dir, strerror(errno));
        llm_free(head);
        return s;
    }
    unlink(tmpl);
    uint64_t limit = 0; /* copy at most this many bytes (0: to the end) */
    if (size && !llm_add_ok(size, LLM_MAP_SLACK, &limit))
        limit = UINT64_MAX;
    if (max && (!limit || max < limit))
        limit = max;
    uint64_t total = 0;
    const uint8_t *p = head;
    size_t k = n;
    for (;;) {
        if (!k) {
            if (eof)
                break;
            ssize_t r = read(fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                s = llm_error_set(LLM_E_IO, "%s: read error: %s", shown(path), strerror(errno));
                break;
            }
            if (r == 0)
                break;
            p = buf;
            k = (size_t)r;
        }
        if (limit && k > limit - total) {
            if (size && (!max || max > size))
                s = llm_error_set(LLM_E_FORMAT, "%s: the input goes on past the %llu bytes its "
                                  "header describes", shown(path), (unsigned long long)size);
            else
                s = llm_error_set(LLM_E_FORMAT, "%s: more than %llu bytes (the limit for this "
                                  "input)", shown(path), (unsigned long long)max);
            break;
        }
        ssize_t w = write(t, p, k);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            s = llm_error_set(LLM_E_IO, "%s: cannot spool input to a temporary file in %s: %s",
                              shown(path), dir, strerror(errno));
            break;
        }
        p += w;
        k -= (size_t)w;
        total += (uint64_t)w;
    }
    llm_free(head);
    if (s) {
        close(t);
        return s;
    }
    *out = t;
    return LLM_OK;
}

llm_status llm_map_open_checked(struct llm_map *m, const char *path,
                                const struct llm_map_check *check)
{
    memset(m, 0, sizeof *m);
    int fd = strcmp(path, "-") == 0 ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llm_error_set(LLM_E_IO, "%s: cannot open: %s", shown(path), strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return llm_error_set(LLM_E_IO, "%s: cannot stat: %s", shown(path), strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return llm_error_set(LLM_E_INVALID, "%s: is a directory", shown(path));
    }
    if (!S_ISREG(st.st_mode)) {
        int t;
        llm_status s = spool(fd, path, check, &t);
        close(fd);
        if (s)
            return s;
        fd = t;
        if (fstat(fd, &st) != 0) {
            close(fd);
            return llm_error_set(LLM_E_IO, "%s: cannot stat: %s", shown(path), strerror(errno));
        }
    }
    if (st.st_size == 0) {
        close(fd);
        return LLM_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return llm_error_set(LLM_E_IO, "%s: cannot map: %s", shown(path), strerror(errno));
    m->data = p;
    m->size = (size_t)st.st_size;
    m->mapped = 1;
    return LLM_OK;
}

llm_status llm_map_open(struct llm_map *m, const char *path)
{
    return llm_map_open_checked(m, path, NULL);
}

void llm_map_close(struct llm_map *m)
{
    if (m->mapped && m->data)
        munmap((void *)m->data, m->size);
    memset(m, 0, sizeof *m);
}

int llm_map_drop(const struct llm_map *m, const void *p, size_t n)
{
    const uint8_t *a = p;
    if (!m->mapped || !m->data || a < m->data || n > m->size || a - m->data > (ptrdiff_t)(m->size - n))
        return 0;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a + page - 1) & ~(page - 1), hi = ((uintptr_t)a + n) & ~(page - 1);
    /* MADV_DONTNEED on a private read-only file mapping drops the pages;
     * the mapping still reads the file's bytes afterwards. MADV_RANDOM
     * first: otherwise a fault on a neighbouring page maps the dropped
     * ones back from the page cache (the kernel's fault-around; on
     * SmolLM2 it brought back 16 of the 70 MB). */
    if (hi > lo) {
        (void)madvise((void *)lo, hi - lo, MADV_RANDOM);
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    return 1;
}

/* Read a whole input into memory, at most `max` bytes: a pipe or a device
 * is read as it comes (no temporary file) and refused past the limit; with
 * `text`, a NUL byte is refused where it is met. */
static llm_status read_small(const char *path, size_t max, int text, char **out, size_t *len)
{
    int fd = strcmp(path, "-") == 0 ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llm_error_set(LLM_E_IO, "%s: cannot open: %s", shown(path), strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return llm_error_set(LLM_E_IO, "%s: cannot stat: %s", shown(path), strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return llm_error_set(LLM_E_INVALID, "%s: is a directory", shown(path));
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
        close(fd);
        return llm_error_set(LLM_E_FORMAT, "%s: file too large (%llu bytes, limit %zu)",
                             shown(path), (unsigned long long)st.st_size, max);
    }
    if (max > SIZE_MAX - 2)
        max = SIZE_MAX - 2;
    /* room for max + 1 bytes (one past the limit tells that it was passed)
     * and the NUL */
    size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 2 : 65536, n = 0;
    if (cap > max + 2)
        cap = max + 2;
    char *buf = llm_malloc(cap);
    llm_status s = buf ? LLM_OK : LLM_E_NOMEM;
    while (!s) {
        if (cap - n < 2) {
            size_t nc = cap > (max + 2) / 2 ? max + 2 : cap * 2;
            char *b = llm_realloc(buf, nc);
            if (!b) {
                s = LLM_E_NOMEM;
                break;
            }
            buf = b, cap = nc;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            s = llm_error_set(LLM_E_IO, "%s: read error: %s", shown(path), strerror(errno));
            break;
        }
        if (r == 0)
            break;
        const char *nul = text ? memchr(buf + n, 0, (size_t)r) : NULL;
        if (nul) {
            s = llm_error_set(LLM_E_FORMAT, "%s: not text (a NUL byte at offset %zu)",
                              shown(path), (size_t)(nul - buf));
            break;
        }
        n += (size_t)r;
        if (n > max) {
            s = llm_error_set(LLM_E_FORMAT, "%s: more than %zu bytes (the limit for this input)",
                              shown(path), max);
            break;
        }
    }
    close(fd);
    if (s) {
        llm_free(buf);
        return s;
    }
    buf[n] = 0;
    *out = buf;
    if (len)
        *len = n;
    return LLM_OK;
}

llm_status llm_read_file(const char *path, size_t max, char **out, size_t *len)
{
    return read_small(path, max, 0, out, len);
}

llm_status llm_read_text(const char *path, size_t max, char **out, size_t *len)
{
    return read_small(path, max, 1, out, len);
}

llm_status llm_stream_status(FILE *f)
{
    errno = 0;
    if (fflush(f) == 0 && !ferror(f))
        return LLM_OK;
    int e = errno;
    return llm_error_set(LLM_E_IO, "%s: write error%s%s",
                         f == stdout ? "<stdout>" : f == stderr ? "<stderr>" : "output",
                         e ? ": " : "", e ? strerror(e) : "");
}

int llm_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ------------------------------------------------------------------------ */
/* writing */

/* Temporary names still on disk, for the signal handler. */
#define MAX_TEMPS 16
static char *volatile temps[MAX_TEMPS];

static void temps_add(char *p)
{
    for (int i = 0; i < MAX_TEMPS; i++)
        if (!temps[i]) {
            temps[i] = p;
            return;
        }
}

static void temps_del(char *p)
{
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temps[i] == p)
            temps[i] = NULL;
}

void llm_out_abort_all_from_signal(void)
{
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temps[i])
            unlink(temps[i]);
}

/* The file that `path` names once symbolic links are followed: the one a
 * write through the link must replace. It may not exist (a dangling link
 * names the file to create). *out is freed with llm_free. */
static llm_status follow_links(const char *path, char **out)
{
    char *cur = llm_strdup(path);
    if (!cur)
        return LLM_E_NOMEM;
    for (int hops = 0;; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
            *out = cur;
            return LLM_OK;
        }
        char link[4096];
        ssize_t k = hops < 40 ? readlink(cur, link, sizeof link - 1) : -1;
        if (k < 0 || (size_t)k >= sizeof link - 1) {
            llm_status s = llm_error_set(LLM_E_IO, "%s: cannot follow the symbolic link: %s", path,
                                         hops >= 40 ? strerror(ELOOP)
                                         : k < 0    ? strerror(errno)
                                                    : strerror(ENAMETOOLONG));
            llm_free(cur);
            return s;
        }
        link[k] = 0;
        /* a relative target is relative to the link's directory */
        const char *slash = strrchr(cur, '/');
        size_t dirlen = link[0] == '/' || !slash ? 0 : (size_t)(slash - cur + 1);
        char *next = llm_malloc(dirlen + (size_t)k + 1);
        if (!next) {
            llm_free(cur);
            return LLM_E_NOMEM;
        }
        memcpy(next, cur, dirlen);
        memcpy(next + dirlen, link, (size_t)k + 1);
        llm_free(cur);
        cur = next;
    }
}

/* Is `name` one of our temporary names, ".NAME.tmp-XXXXXX"? */
static int is_our_temp(const char *name)
{
    size_t n = strlen(name);
    if (n < 13 || name[0] != '.' || memcmp(name + n - 11, ".tmp-", 5) != 0)
        return 0;
    for (size_t i = n - 6; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return 0;
    }
    return 1;
}

/* Remove the temporary files that writers of this user left in `dir` (""
 * for the current directory) more than a day ago: a process killed by
 * SIGKILL cannot remove its own. Best effort: nothing here is an error. */
static void remove_stale_temps(const char *dir)
{
    DIR *d = opendir(*dir ? dir : ".");
    if (!d)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (!is_our_temp(e->d_name) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || st.st_uid != geteuid() || now - st.st_mtime < LLM_OUT_STALE_S)
            continue;
        (void)unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

llm_status llm_out_open(struct llm_out *o, const char *path)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->buf = llm_malloc(OUT_BUF_SIZE);
    if (!o->buf)
        return LLM_E_NOMEM;
    if (strcmp(path, "-") == 0) {
        o->fd = 1;
        return LLM_OK;
    }
    llm_status s = LLM_OK;
    struct stat st;
    if (!(o->path = llm_strdup(path)))
        goto fail;
    int exists = stat(path, &st) == 0; /* through any links */
    if (!exists && errno != ENOENT) {
        s = llm_error_set(LLM_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (exists && S_ISDIR(st.st_mode)) {
        s = llm_error_set(LLM_E_IO, "%s: is a directory", path);
        goto fail;
    }
    if (exists && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
        /* renaming over a device or a FIFO would replace it with a file
         * (as root, -o /dev/null replaced the system's) */
        o->fd = open(path, O_WRONLY | O_CLOEXEC);
        if (o->fd < 0) {
            s = llm_error_set(LLM_E_IO, "%s: cannot open for writing: %s", path, strerror(errno));
            goto fail;
        }
        return LLM_OK;
    }
    if (exists && !S_ISREG(st.st_mode)) {
        s = llm_error_set(LLM_E_IO, "%s: not a regular file, FIFO or character device", path);
        goto fail;
    }
    /* the file to replace: through the links to it, so that a link stays a
     * link (a dangling one names the file to create) */
    if (exists) {
        char *real = realpath(path, NULL);
        if (!real) {
            s = llm_error_set(LLM_E_IO, "%s: cannot resolve: %s", path, strerror(errno));
            goto fail;
        }
        o->dest = llm_strdup(real);
        free(real);
        if (!o->dest)
            goto fail;
    } else if ((s = follow_links(path, &o->dest))) {
        goto fail;
    }
    size_t n = strlen(o->dest) + 32;
    if (!(o->tmp = llm_malloc(n))) {
        s = LLM_E_NOMEM;
        goto fail;
    }
    const char *slash = strrchr(o->dest, '/');
    size_t dirlen = slash ? (size_t)(slash - o->dest + 1) : 0;
    snprintf(o->tmp, n, "%.*s.%s.tmp-XXXXXX", (int)dirlen, o->dest, slash ? slash + 1 : o->dest);
    {
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", (int)dirlen, o->dest);
        if (dirlen < sizeof dir)
            remove_stale_temps(dir);
    }
    o->fd = mkostemp(o->tmp, O_CLOEXEC);
    if (o->fd < 0) {
        s = llm_error_set(LLM_E_IO, "%s: cannot create: %s", path, strerror(errno));
        goto fail;
    }
    /* mkstemp makes 0600: give a new file the usual 0666 & ~umask, and a
     * replaced one its old permissions */
    mode_t um = umask(0);
    umask(um);
    fchmod(o->fd, exists ? st.st_mode & 0777 : 0666 & ~um);
    temps_add(o->tmp);
    return LLM_OK;
fail:
    llm_free(o->buf);
    llm_free(o->path);
    llm_free(o->dest);
    llm_free(o->tmp);
    memset(o, 0, sizeof *o);
    o->fd = -1;
    return s ? s : LLM_E_NOMEM;
}

static llm_status out_raw(struct llm_out *o, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(o->fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return llm_error_set(LLM_E_IO, "%s: write error: %s",
                                 o->path ? o->path : "<stdout>", strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return LLM_OK;
}

static llm_status out_flush(struct llm_out *o)
{
    llm_status s = out_raw(o, o->buf, o->nbuf);
    o->nbuf = 0;
    return s;
}

llm_status llm_out_write(struct llm_out *o, const void *p, size_t n)
{
    const uint8_t *b = p;
    o->pos += n;
    if (o->nbuf + n <= OUT_BUF_SIZE) {
        if (n)
            memcpy(o->buf + o->nbuf, b, n);
        o->nbuf += n;
        return LLM_OK;
    }
    LLM_TRY(out_flush(o));
    if (n >= OUT_BUF_SIZE)
        return out_raw(o, b, n);
    memcpy(o->buf, b, n);
    o->nbuf = n;
    return LLM_OK;
}

llm_status llm_out_flush(struct llm_out *o)
{
    return out_flush(o);
}

llm_status llm_out_zeros(struct llm_out *o, size_t n)
{
    static const uint8_t z[4096];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        LLM_TRY(llm_out_write(o, z, k));
        n -= k;
    }
    return LLM_OK;
}

llm_status llm_out_pad(struct llm_out *o, uint64_t align)
{
    return llm_out_zeros(o, (size_t)(llm_align_up(o->pos, align) - o->pos));
}

static void out_release(struct llm_out *o)
{
    if (o->tmp)
        temps_del(o->tmp);
    llm_free(o->buf);
    llm_free(o->path);
    llm_free(o->dest);
    llm_free(o->tmp);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}

llm_status llm_out_commit(struct llm_out *o)
{
    llm_status s = out_flush(o);
    if (!o->path) { /* stdout stays open: the caller flushes and checks it */
        out_release(o);
        return s;
    }
    if (close(o->fd) != 0 && !s)
        s = llm_error_set(LLM_E_IO, "%s: write error: %s", o->path, strerror(errno));
    o->fd = -1;
    if (o->tmp) {
        if (!s && rename(o->tmp, o->dest) != 0)
            s = llm_error_set(LLM_E_IO, "%s: cannot rename into place: %s", o->path,
                              strerror(errno));
        if (s)
            unlink(o->tmp);
    }
    out_release(o);
    return s;
}

void llm_out_abort(struct llm_out *o)
{
    if (o->path) {
        if (o->fd >= 0)
            close(o->fd);
        if (o->tmp)
            unlink(o->tmp);
    }
    out_release(o);
}

const char *llm_next_line(const char *text, size_t len, size_t *at, size_t *n)
{
    if (*at >= len)
        return NULL;
    const char *line = text + *at, *nl = memchr(line, '\n', len - *at);
    *n = nl ? (size_t)(nl - line) : len - *at;
    *at += *n + 1;
    return line;
}
