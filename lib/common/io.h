/* io.h: whole-file mappings, small-file reads and atomic writers.
 *
 * A path of "-" means standard input (for maps and reads) or standard output
 * (for writers). Input that cannot be mapped (a pipe, a terminal) is spooled
 * to an unlinked temporary file first, so every reader sees one mapping.
 * Writers to a path write "DIR/.NAME.tmp-XXXXXX" and rename it over NAME on
 * commit: an interrupted write never leaves a damaged file under NAME.
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

/* Map the whole of `path` ("-" = stdin) read-only. */
llm_status llm_map_open(struct llm_map *m, const char *path);
void llm_map_close(struct llm_map *m);
/* If [p, p + n) lies in m's mapping, tell the kernel its whole pages are
 * not needed now: they leave the resident set and are read from the file
 * again if touched (a copy made of them keeps memory to one copy). Returns
 * 1 if it did, 0 if the range is not in a mapping of m. */
int llm_map_drop(const struct llm_map *m, const void *p, size_t n);

/* Read a whole (small) file into a NUL-terminated buffer; refuses files
 * larger than `max` bytes. *out is freed with llm_free. */
llm_status llm_read_file(const char *path, size_t max, char **out, size_t *len);

/* Is `path` a directory? */
int llm_is_dir(const char *path);

struct llm_out {
    int fd;
    char *path;      /* final name, or NULL for stdout */
    char *tmp;       /* temporary name while writing */
    uint64_t pos;    /* bytes written so far */
    uint8_t *buf;    /* write buffer */
    size_t nbuf;
};

llm_status llm_out_open(struct llm_out *o, const char *path);
llm_status llm_out_write(struct llm_out *o, const void *p, size_t n);
llm_status llm_out_zeros(struct llm_out *o, size_t n);
/* Pad with zeros up to a multiple of `align`. */
llm_status llm_out_pad(struct llm_out *o, uint64_t align);
/* Flush, close and rename into place. The writer is released either way. */
llm_status llm_out_commit(struct llm_out *o);
/* Drop a write: remove the temporary file. Safe after a failed commit. */
void llm_out_abort(struct llm_out *o);

/* Remove every temporary file still being written (from a signal handler:
 * async-signal-safe). */
void llm_out_abort_all_from_signal(void);

#endif
