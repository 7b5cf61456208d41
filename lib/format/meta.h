/* meta.h: the model metadata, a small YAML document tree.
 *
 * The .llm metadata is YAML (libyaml): maps, sequences and scalars. Scalars
 * are typed by the YAML 1.2 core schema (null, bool, int, float, string);
 * a quoted scalar is always a string. The tree keeps every key it is given,
 * in order, so unknown keys survive a read-modify-write.
 *
 * Paths name nested map keys with dots: "hparams.block_count". Keys that
 * themselves contain dots (kept GGUF keys such as "general.url" under the
 * "gguf" map) are reached with llm_meta_child().
 */
#ifndef LLM_FORMAT_META_H
#define LLM_FORMAT_META_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

enum llm_meta_kind {
    LLM_META_NULL,
    LLM_META_BOOL,
    LLM_META_INT,
    LLM_META_FLOAT,
    LLM_META_STR,
    LLM_META_SEQ,
    LLM_META_MAP,
};

struct llm_meta {
    enum llm_meta_kind kind;
    char *key;                /* name in the parent map; NULL otherwise */
    int64_t i;                /* INT, BOOL (0/1) */
    double f;                 /* FLOAT */
    int f32;                  /* FLOAT: print as the shortest float32 repr */
    char *s;                  /* STR: bytes, NUL-terminated (len in slen) */
    size_t slen;
    struct llm_meta **items;  /* SEQ and MAP children, in order */
    size_t n, cap;
    uint32_t *index;          /* MAP of many keys: open-addressed, item index + 1, 0 = empty */
    size_t index_cap;         /* a power of two above twice n; 0 while the map is scanned */
    size_t line;              /* 1-based source line, 0 when built in memory */
};

struct llm_meta *llm_meta_new(enum llm_meta_kind kind); /* NULL on ENOMEM */
void llm_meta_free(struct llm_meta *m);
struct llm_meta *llm_meta_clone(const struct llm_meta *m);

/* Lookup. NULL when absent (or when a path crosses a non-map). A map of
 * more than a few keys keeps a hash index of them, so that reading or
 * building a map of n keys takes O(n) (a crafted file may have 100,000). */
struct llm_meta *llm_meta_child(const struct llm_meta *map, const char *key);
struct llm_meta *llm_meta_get(const struct llm_meta *root, const char *path);

/* Typed reads of a path. LLM_E_NOTFOUND when absent (no detail set, so
 * callers may treat it as "use the default"); LLM_E_FORMAT with a detail
 * when present with the wrong type. An INT is accepted where a float is
 * asked for. */
llm_status llm_meta_get_i64(const struct llm_meta *root, const char *path, int64_t *out);
llm_status llm_meta_get_f64(const struct llm_meta *root, const char *path, double *out);
llm_status llm_meta_get_bool(const struct llm_meta *root, const char *path, int *out);
llm_status llm_meta_get_str(const struct llm_meta *root, const char *path, const char **out);

/* Writes: create the maps along the path, replace any existing value. */
llm_status llm_meta_set_i64(struct llm_meta *root, const char *path, int64_t v);
llm_status llm_meta_set_f64(struct llm_meta *root, const char *path, double v);
llm_status llm_meta_set_f32(struct llm_meta *root, const char *path, float v);
llm_status llm_meta_set_bool(struct llm_meta *root, const char *path, int v);
llm_status llm_meta_set_str(struct llm_meta *root, const char *path, const char *v);
llm_status llm_meta_set_strn(struct llm_meta *root, const char *path, const char *v, size_t n);
/* Attach `node` (taken over, freed on failure) at `path`. */
llm_status llm_meta_set(struct llm_meta *root, const char *path, struct llm_meta *node);
/* Put `node` under `key` of `map` (the key is used as is, dots included). */
llm_status llm_meta_put(struct llm_meta *map, const char *key, struct llm_meta *node);
/* Append to a sequence (node taken over). */
llm_status llm_meta_push(struct llm_meta *seq, struct llm_meta *node);
/* Remove a path; no error when absent. */
void llm_meta_del(struct llm_meta *root, const char *path);

/* Scalar constructors (NULL on ENOMEM). */
struct llm_meta *llm_meta_new_i64(int64_t v);
struct llm_meta *llm_meta_new_f64(double v);
struct llm_meta *llm_meta_new_f32(float v);
struct llm_meta *llm_meta_new_bool(int v);
struct llm_meta *llm_meta_new_strn(const char *s, size_t n);

/* Parse a YAML document. `name` is used in error details ("NAME:LINE: ...").
 * The document must be a map; duplicate keys are an error. */
llm_status llm_meta_parse_yaml(struct llm_meta **out, const char *text, size_t len,
                               const char *name);
/* Emit YAML text (malloc'd, NUL-terminated; *len excludes the NUL). */
llm_status llm_meta_emit_yaml(const struct llm_meta *root, char **out, size_t *len);
/* Write bytes as a JSON string literal: control characters escaped, and
 * bytes that are not valid UTF-8 (a text cut inside a character) written as
 * U+FFFD, so that the output is always JSON. */
void llm_json_string(FILE *f, const char *s, size_t n);
/* Write as JSON (floats that are not finite become null). */
llm_status llm_meta_write_json(const struct llm_meta *m, FILE *f, int indent);

#endif
