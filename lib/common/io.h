/* io.h: whole-file mappings, small-file reads and atomic writers.
 *
 * A path of "-" means standard input (for maps and reads) or standard output
 * (for writers).
 *
 * Input that cannot be mapped (a pipe, a terminal, a device) is spooled to
 * an unlinked temporary file first, so every reader sees one mapping. The
 * spool is never unbounded by design: a caller that knows the input's format
 * gives a check of its first bytes (llm_map_check), which stops the copy at
 * the first inconsistency and at the size the header gives; small inputs get
 * a byte limit. llm_read_file reads such input into memory, within its limit,
 * without a temporary file.
 *
 * Writers to a path that is a regular file, or that does not exist yet,
 * write "DIR/.NAME.tmp-XXXXXX" and rename it over NAME on commit: an
 * interrupted write never leaves a damaged file under NAME. A symbolic link
 * is followed to the file it names, which is replaced, and the link stays a
 * link. A FIFO or a character device is written in place (no temporary
 * file: renaming over it would replace the device). A process killed by
 * SIGKILL cannot remove its temporary file; the next writer into the same
 * directory removes such files of its user that are more than a day old.
 */
#ifndef LLM_COMMON_IO_H
#define LLM_COMMON_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"

struct llm_map {
    const uint8_t *data; /* (size) bytes, read-only; NULL when size is 0 */
    size_t size;
    int mapped;          /* 1: munmap on close; 0: nothing to release */
};

/* A check of the first bytes of input that is spooled (not a regular
 * file), before the rest is copied. `head` holds the first n bytes (all of
 * the input when eof). Return an error to stop at once. Otherwise set *need:
 * more than n to see the first *need bytes before deciding (the head is kept
 * in memory: at most LLM_MAP_HEAD_MAX bytes), or at most n when the head is
 * consistent; then *size, when not 0, is the size of the whole input that
 * the head gives: the copy stops there (input that goes on for more than
 * LLM_MAP_SLACK bytes after it is an error; a shorter one is the parser's to
 * find). */
typedef llm_status (*llm_map_check_fn)(const uint8_t *head, size_t n, int eof, uint64_t *need,
                                       uint64_t *size, void *ctx);
#define LLM_MAP_HEAD_MAX ((size_t)257 << 20) /* a .llm header and its largest metadata */
#define LLM_MAP_SLACK ((uint64_t)1 << 20)

struct llm_map_check {
    llm_map_check_fn fn; /* NULL: no check of the head */
    void *ctx;
    uint64_t max;        /* spooled input of more bytes is refused (0: no limit) */
};

/* Map the whole of `path` ("-" = stdin) read-only; input that is not a
 * regular file is spooled through `check` (NULL: unchecked and unbounded,
 * for input the caller trusts). */
llm_status llm_map_open_checked(struct llm_map *m, const char *path,
                                const struct llm_map_check *check);
llm_status llm_map_open(struct llm_map *m, const char *path);
void llm_map_close(struct llm_map *m);
/* If [p, p + n) lies in m's mapping, tell the kernel its whole pages are
 * not needed now: they leave the resident set and are read from the file
 * again if touched (a copy made of them keeps memory to one copy). Returns
 * 1 if it did, 0 if the range is not in a mapping of m. */
int llm_map_drop(const struct llm_map *m, const void *p, size_t n);

/* Read a whole (small) file into a NUL-terminated buffer; refuses files
 * larger than `max` bytes (a pipe or a device is read up to the limit, then
 * refused). *out is freed with llm_free. */
llm_status llm_read_file(const char *path, size_t max, char **out, size_t *len);
/* The same for text: a NUL byte is refused where it is met, so that a wrong
 * path (a binary file, /dev/zero) stops at once. */
llm_status llm_read_text(const char *path, size_t max, char **out, size_t *len);

/* LLM_OK when everything written to the stream has gone out (it is
 * flushed); else LLM_E_IO with "<stdout>: write error: ..." (the stream's
 * name: <stdout>, <stderr> or "output"). */
llm_status llm_stream_status(FILE *f);

/* The line of text (len bytes) that starts at *at, without its '\n', and
 * its length in *n; *at moves past it. NULL when *at >= len. */
const char *llm_next_line(const char *text, size_t len, size_t *at, size_t *n);

/* Is `path` a directory? */
int llm_is_dir(const char *path);

struct llm_out {
    int fd;
    char *path;      /* the name given, for messages; NULL for stdout */
    char *dest;      /* the file replaced on commit (path with its links followed) */
    char *tmp;       /* temporary name while writing; NULL when written in place */
    uint64_t pos;    /* bytes written so far */
    uint8_t *buf;    /* write buffer */
    size_t nbuf;
};

/* A temporary file of ours this old (seconds) is stale: llm_out_open
 * removes such files from the directory it writes into. */
#define LLM_OUT_STALE_S (24 * 3600)

llm_status llm_out_open(struct llm_out *o, const char *path);
llm_status llm_out_write(struct llm_out *o, const void *p, size_t n);
llm_status llm_out_zeros(struct llm_out *o, size_t n);
/* Write out what is buffered (a stream's reader sees it now). */
llm_status llm_out_flush(struct llm_out *o);
/* Pad with zeros up to a multiple of `align`. */
llm_status llm_out_pad(struct llm_out *o, uint64_t align);
/* Flush, close and rename into place (a FIFO or character device: flush and
 * close). The writer is released either way. */
llm_status llm_out_commit(struct llm_out *o);
/* Drop a write: remove the temporary file. Safe after a failed commit. */
void llm_out_abort(struct llm_out *o);

/* Remove every temporary file still being written (from a signal handler:
 * async-signal-safe). */
void llm_out_abort_all_from_signal(void);

#endif
