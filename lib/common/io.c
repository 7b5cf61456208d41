/* io.c: mappings, spooling of pipes, atomic writers. */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"

#define OUT_BUF_SIZE (1u << 20)

/* ------------------------------------------------------------------------ */
/* reading */

static const char *shown(const char *path)
{
    return strcmp(path, "-") == 0 ? "<stdin>" : path;
}

static llm_status read_all_fd(int fd, const char *path, int out_fd)
{
    static uint8_t buf[1 << 16];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0)
            return LLM_OK;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return llm_error_set(LLM_E_IO, "%s: read error: %s", shown(path), strerror(errno));
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out_fd, buf + off, (size_t)(n - off));
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return llm_error_set(LLM_E_IO, "%s: cannot spool input to a temporary file: %s",
                                     shown(path), strerror(errno));
            }
            off += w;
        }
    }
}

/* Copy a non-seekable input to an unlinked temporary file; return its fd. */
static llm_status spool(int fd, const char *path, int *out)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    char tmpl[4096];
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/llm-spool-XXXXXX", dir) >= sizeof tmpl)
        return llm_error_set(LLM_E_IO, "TMPDIR is too long");
    int t = mkstemp(tmpl);
    if (t < 0)
        return llm_error_set(LLM_E_IO, "%s: cannot create a temporary file in %s: %s",
                             shown(path), dir, strerror(errno));
    unlink(tmpl);
    llm_status s = read_all_fd(fd, path, t);
    if (s) {
        close(t);
        return s;
    }
    *out = t;
    return LLM_OK;
}

llm_status llm_map_open(struct llm_map *m, const char *path)
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
        llm_status s = spool(fd, path, &t);
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

llm_status llm_read_file(const char *path, size_t max, char **out, size_t *len)
{
    struct llm_map m;
    LLM_TRY(llm_map_open(&m, path));
    if (m.size > max) {
        llm_map_close(&m);
        return llm_error_set(LLM_E_FORMAT, "%s: file too large (%zu bytes, limit %zu)",
                             shown(path), m.size, max);
    }
    char *buf = llm_malloc(m.size + 1);
    if (!buf) {
        llm_map_close(&m);
        return LLM_E_NOMEM;
    }
    if (m.size)
        memcpy(buf, m.data, m.size);
    buf[m.size] = 0;
    *out = buf;
    if (len)
        *len = m.size;
    llm_map_close(&m);
    return LLM_OK;
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
    o->path = llm_strdup(path);
    size_t n = strlen(path) + 32;
    o->tmp = llm_malloc(n);
    if (!o->path || !o->tmp)
        goto nomem;
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path + 1) : 0;
    snprintf(o->tmp, n, "%.*s.%s.tmp-XXXXXX", (int)dirlen, path, slash ? slash + 1 : path);
    o->fd = mkostemp(o->tmp, O_CLOEXEC);
    if (o->fd < 0) {
        llm_status s = llm_error_set(LLM_E_IO, "%s: cannot create: %s", path, strerror(errno));
        llm_free(o->buf);
        llm_free(o->path);
        llm_free(o->tmp);
        memset(o, 0, sizeof *o);
        return s;
    }
    /* mkstemp makes 0600; give the final file the usual 0666 & ~umask. */
    mode_t um = umask(0);
    umask(um);
    fchmod(o->fd, 0666 & ~um);
    temps_add(o->tmp);
    return LLM_OK;
nomem:
    llm_free(o->buf);
    llm_free(o->path);
    llm_free(o->tmp);
    memset(o, 0, sizeof *o);
    return LLM_E_NOMEM;
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
    if (!s && rename(o->tmp, o->path) != 0)
        s = llm_error_set(LLM_E_IO, "%s: cannot rename into place: %s", o->path, strerror(errno));
    if (s)
        unlink(o->tmp);
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
