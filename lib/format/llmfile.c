/* llmfile.c: the .llm container, version 1: reader and writer.
 *
 * Layout (all integers little-endian; specified in man/llm-format.5):
 *
 *   0        header (64 bytes)
 *   64       metadata: YAML text, meta_size bytes, zero padding to `alignment`
 *   ...      tensor data, each tensor at a multiple of `alignment`
 *   ...      tensor index (at a multiple of `alignment`)
 *   size-64  trailer (64 bytes)
 *
 * The index sits at the end so that a writer can stream: compressed sizes
 * are only known once each tensor is written, and a pipe cannot seek back.
 * A reader reads the header, the metadata and the trailer, then the index:
 * a few kilobytes, whatever the size of the weights.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "../common/alloc.h"
#include "../common/bytes.h"
#include "../common/io.h"
#include "import.h"

#define LLM_MAGIC "\x89LLM\r\n\x1a\n" /* 8 bytes: catches text-mode damage */
#define TRAILER_MAGIC "LLMINDEX"
#define LLM_VERSION_1 1
#define HEADER_SIZE 64
#define TRAILER_SIZE 64
#define ALIGNMENT 64
#define INDEX_FIXED 80          /* bytes of an index record after its name */
#define FEATURE_ZSTD (1ull << 0) /* tensors may be zstd-compressed (set before they are written) */
#define KNOWN_FEATURES FEATURE_ZSTD
#define KNOWN_TENSOR_FLAGS LLM_TENSOR_AUX
#define MAX_META_SIZE (256u << 20)


/* Structural checksums (header, metadata, index, trailer). Fuzz builds skip
 * the comparison so that mutations reach the parsers behind them, the way
 * PNG fuzzers ignore CRCs. */
static int sum_ok(const void *p, size_t n, uint64_t want)
{
#ifdef LLM_FUZZING
    (void)p, (void)n, (void)want;
    return 1;
#else
    return XXH3_64bits(p, n) == want;
#endif
}

void llm_import_opts_default(struct llm_import_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dequant_type = LLM_TYPE_F16;
    o->nonfinite = LLM_FINITE_REFUSE;
}

void llm_file_set_checks(struct llm_file *f, const struct llm_import_opts *o)
{
    struct llm_import_opts def;
    if (!o) {
        llm_import_opts_default(&def);
        o = &def;
    }
    f->check_sums = !o->no_verify;
    f->check_finite = o->no_verify ? LLM_FINITE_IGNORE : o->nonfinite;
}

void llm_write_opts_default(struct llm_write_opts *o)
{
    memset(o, 0, sizeof *o);
    o->type = LLM_TYPE_F16;
}

/* ------------------------------------------------------------------------ */
/* reader */

/* The checks that need only the 64 bytes of the header (shared with the
 * check of a spooled stream, which makes them before copying the rest). */
static llm_status check_header(const uint8_t *d, const char *name)
{
    uint32_t version = llm_get32(d + 8);
    if (version != LLM_VERSION_1)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: format version %u is not supported (this build reads version 1)",
                             name, version);
    if (!sum_ok(d, 56, llm_get64(d + 56)))
        return llm_error_set(LLM_E_FORMAT, "%s: header checksum mismatch (corrupt header)", name);
    uint32_t header_size = llm_get32(d + 12);
    uint64_t features = llm_get64(d + 16), meta_off = llm_get64(d + 24), meta_size = llm_get64(d + 32);
    uint32_t align = llm_get32(d + 48);
    if (features & ~KNOWN_FEATURES)
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: requires features 0x%llx that this build does not know", name,
                             (unsigned long long)(features & ~KNOWN_FEATURES));
    if (header_size != HEADER_SIZE)
        return llm_error_set(LLM_E_FORMAT, "%s: bad header size %u (expected %d)", name,
                             header_size, HEADER_SIZE);
    if (meta_off != HEADER_SIZE)
        return llm_error_set(LLM_E_FORMAT, "%s: bad metadata offset %llu (expected %d)", name,
                             (unsigned long long)meta_off, HEADER_SIZE);
    if (align < 64 || (align & (align - 1)) || align > (1u << 20))
        return llm_error_set(LLM_E_FORMAT, "%s: bad alignment %u", name, align);
    if (meta_size > MAX_META_SIZE)
        return llm_error_set(LLM_E_FORMAT, "%s: metadata of %llu bytes (at most %u)", name,
                             (unsigned long long)meta_size, MAX_META_SIZE);
    return LLM_OK;
}

llm_status llm_llm_head(const uint8_t *d, size_t n, int eof, uint64_t *need, uint64_t *size,
                        const char *name)
{
    *size = 0; /* the index at the end gives the size */
    if (n < HEADER_SIZE) {
        *need = HEADER_SIZE;
        return eof ? llm_error_set(LLM_E_FORMAT, "%s: truncated (%zu bytes)", name, n) : LLM_OK;
    }
    if (memcmp(d, LLM_MAGIC, 8) != 0)
        return llm_error_set(LLM_E_FORMAT, "%s: not an .llm file (bad magic)", name);
    LLM_TRY(check_header(d, name));
    uint64_t meta_size = llm_get64(d + 32);
    *need = HEADER_SIZE + meta_size;
    if (n < *need)
        return eof ? llm_error_set(LLM_E_FORMAT, "%s: metadata runs past the end of the file "
                                   "(truncated?)", name) : LLM_OK;
    if (!sum_ok(d + HEADER_SIZE, (size_t)meta_size, llm_get64(d + 40)))
        return llm_error_set(LLM_E_FORMAT, "%s: metadata checksum mismatch", name);
    return LLM_OK;
}

llm_status llm_llm_parse(struct llm_file **out, const uint8_t *d, size_t size, const char *name,
                         const struct llm_import_opts *o)
{
    struct llm_file *f = NULL;
    llm_status s;
#define FAIL(...) do { s = llm_error_set(LLM_E_FORMAT, __VA_ARGS__); goto fail; } while (0)
    if (size < 8 || memcmp(d, LLM_MAGIC, 8) != 0)
        return llm_error_set(LLM_E_FORMAT, "%s: not an .llm file (bad magic)", name);
    if (size < HEADER_SIZE + TRAILER_SIZE)
        return llm_error_set(LLM_E_FORMAT, "%s: truncated (%zu bytes)", name, size);
    LLM_TRY(check_header(d, name));
    uint32_t version = llm_get32(d + 8);
    uint64_t features = llm_get64(d + 16), meta_off = llm_get64(d + 24), meta_size = llm_get64(d + 32);
    uint32_t align = llm_get32(d + 48);
    if (meta_off + meta_size > size - TRAILER_SIZE)
        return llm_error_set(LLM_E_FORMAT, "%s: metadata runs past the end of the file (truncated?)",
                             name);
    if (!sum_ok(d + meta_off, (size_t)meta_size, llm_get64(d + 40)))
        return llm_error_set(LLM_E_FORMAT, "%s: metadata checksum mismatch", name);

    const uint8_t *tr = d + size - TRAILER_SIZE;
    if (memcmp(tr, TRAILER_MAGIC, 8) != 0)
        return llm_error_set(LLM_E_FORMAT, "%s: no index trailer at the end (truncated file?)", name);
    if (!sum_ok(tr, 56, llm_get64(tr + 56)))
        return llm_error_set(LLM_E_FORMAT, "%s: trailer checksum mismatch", name);
    uint64_t idx_off = llm_get64(tr + 8), idx_size = llm_get64(tr + 16), n_tensors = llm_get64(tr + 24);
    if (llm_get64(tr + 40) != size)
        return llm_error_set(LLM_E_FORMAT, "%s: file is %zu bytes, the trailer says %llu", name,
                             size, (unsigned long long)llm_get64(tr + 40));
    uint64_t data_start = llm_align_up(meta_off + meta_size, align);
    if (idx_off < data_start || idx_off > size - TRAILER_SIZE ||
        idx_size > size - TRAILER_SIZE - idx_off)
        return llm_error_set(LLM_E_FORMAT, "%s: index out of bounds", name);
    if (!sum_ok(d + idx_off, (size_t)idx_size, llm_get64(tr + 32)))
        return llm_error_set(LLM_E_FORMAT, "%s: index checksum mismatch", name);
    if (n_tensors > idx_size / (4 + INDEX_FIXED))
        return llm_error_set(LLM_E_FORMAT, "%s: index too small for %llu tensors", name,
                             (unsigned long long)n_tensors);

    LLM_TRY(llm_file_new(&f, name, "llm"));
    f->src_version = version;
    llm_file_set_checks(f, o);
    llm_meta_free(f->meta);
    f->meta = NULL;
    s = llm_meta_parse_yaml(&f->meta, (const char *)d + meta_off, (size_t)meta_size, name);
    if (s)
        goto fail;

    const uint8_t *p = d + idx_off, *end = d + idx_off + idx_size;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if ((size_t)(end - p) < 4)
            FAIL("%s: index entry %llu truncated", name, (unsigned long long)i);
        uint32_t nlen = llm_get32(p);
        p += 4;
        if (nlen == 0 || nlen >= LLM_MAX_NAME || (size_t)(end - p) < (size_t)nlen + INDEX_FIXED)
            FAIL("%s: index entry %llu: bad name length %u", name, (unsigned long long)i, nlen);
        char tname[LLM_MAX_NAME];
        memcpy(tname, p, nlen);
        tname[nlen] = 0;
        if (strlen(tname) != nlen)
            FAIL("%s: index entry %llu: name contains a NUL byte", name, (unsigned long long)i);
        p += nlen;
        uint32_t type = llm_get32(p), n_dims = llm_get32(p + 4), flags = llm_get32(p + 8), comp = llm_get32(p + 12);
        int64_t ne[4];
        for (int k = 0; k < 4; k++)
            ne[k] = (int64_t)llm_get64(p + 16 + 8 * k);
        uint64_t off = llm_get64(p + 48), stored = llm_get64(p + 56), nbytes = llm_get64(p + 64),
                 sum = llm_get64(p + 72);
        p += INDEX_FIXED;
        if (!llm_type_traits(type))
            FAIL("%s: tensor '%s': unknown type %u (written by a newer llm-tools?)", name, tname, type);
        if (flags & ~KNOWN_TENSOR_FLAGS)
            FAIL("%s: tensor '%s': unknown flags 0x%x", name, tname, flags & ~KNOWN_TENSOR_FLAGS);
        if (comp > LLM_COMPRESS_ZSTD)
            FAIL("%s: tensor '%s': unknown compression %u", name, tname, comp);
        if (comp == LLM_COMPRESS_ZSTD && !(features & FEATURE_ZSTD))
            FAIL("%s: tensor '%s': compressed, but the header does not say so", name, tname);
        for (uint32_t k = n_dims; k < 4 && n_dims <= 4; k++)
            if (ne[k] != 1)
                FAIL("%s: tensor '%s': unused dimension is not 1", name, tname);
        struct llm_tensor *t;
        s = llm_file_add_tensor(f, tname, (enum llm_type)type, n_dims, ne, NULL, &t);
        if (s) {
            if (s != LLM_E_NOMEM)
                s = LLM_E_FORMAT;
            goto fail;
        }
        if (t->nbytes != nbytes)
            FAIL("%s: tensor '%s': size %llu does not match its type and shape (%llu)", name, tname,
                 (unsigned long long)nbytes, (unsigned long long)t->nbytes);
        if (off % align || off < data_start || off > idx_off || stored > idx_off - off)
            FAIL("%s: tensor '%s': data out of bounds (offset %llu, %llu bytes)", name, tname,
                 (unsigned long long)off, (unsigned long long)stored);
        if (comp == LLM_COMPRESS_NONE && stored != nbytes)
            FAIL("%s: tensor '%s': stored size %llu, expected %llu", name, tname,
                 (unsigned long long)stored, (unsigned long long)nbytes);
        if (comp == LLM_COMPRESS_ZSTD && stored == 0)
            FAIL("%s: tensor '%s': empty compressed data", name, tname);
        t->flags = flags;
        t->compression = comp;
        t->offset = off;
        t->stored_size = stored;
        t->checksum = sum;
        t->stored = d + off;
        /* the data pointer is set at the first use, once checked */
        t->checked = !f->check_sums && !f->check_finite && comp == LLM_COMPRESS_NONE;
        if (t->checked)
            t->data = d + off;
    }
    if (p != end)
        FAIL("%s: %zu unexpected bytes at the end of the index", name, (size_t)(end - p));
    if (o && o->verify && (s = llm_llm_verify(f, NULL)))
        goto fail;
    *out = f;
    return LLM_OK;
fail:
    llm_file_free(f);
    return s;
#undef FAIL
}

llm_status llm_llm_verify(struct llm_file *f, size_t *n_checked)
{
    size_t n = 0;
    void *scratch = NULL; /* one decompressed tensor at a time */
    size_t cap = 0;
    llm_status s = LLM_OK;
    for (size_t i = 0; i < f->n_tensors && !s; i++) {
        struct llm_tensor *t = &f->tensors[i];
        if (!t->stored)
            continue;
        s = llm_tensor_check(f, t, &scratch, &cap);
        n++;
    }
    llm_free(scratch);
    if (!s && n_checked)
        *n_checked = n;
    return s;
}

llm_status llm_llm_open(struct llm_file **out, const char *path, const struct llm_import_opts *o)
{
    struct llm_map m;
    LLM_TRY(llm_model_map(&m, path));
    struct llm_file *f;
    llm_status s = llm_llm_parse(&f, m.data, m.size, strcmp(path, "-") ? path : "<stdin>", o);
    if (s) {
        llm_map_close(&m);
        return s;
    }
    s = llm_file_add_map(f, &m);
    if (s) {
        llm_file_free(f);
        return s;
    }
    *out = f;
    return LLM_OK;
}

/* ------------------------------------------------------------------------ */
/* writer */

struct entry {
    uint32_t compression;
    uint64_t offset, stored, checksum;
};

static llm_status write_tensor(struct llm_file *f, struct llm_tensor *t, struct llm_out *w,
                               ZSTD_CCtx *cctx, int level, void **scratch, size_t *scratch_n,
                               void **cbuf, size_t *cbuf_n, struct entry *e)
{
    const void *bytes;
    size_t n = (size_t)t->nbytes;
    if (t->nbytes > SIZE_MAX)
        return llm_error_set(LLM_E_NOMEM, "%s: tensor too large", t->name);
    LLM_TRY(llm_tensor_peek(f, t, &bytes));
    if (!bytes) {
        if (n > *scratch_n) {
            llm_free(*scratch);
            if (!(*scratch = llm_malloc(n))) {
                *scratch_n = 0;
                return LLM_E_NOMEM;
            }
            *scratch_n = n;
        }
        LLM_TRY(llm_tensor_read(f, t, *scratch));
        bytes = *scratch;
    }
    /* bytes of a .llm file that were checked against their checksum keep
     * it (hashing them again would cost a second pass) */
    int known = t->stored && t->checked && (f->check_sums || t->compression == LLM_COMPRESS_ZSTD);
    e->checksum = known ? t->checksum : XXH3_64bits(bytes, n);
    e->offset = w->pos;
    e->compression = LLM_COMPRESS_NONE;
    e->stored = n;
    if (level > 0) {
        size_t bound = ZSTD_compressBound(n);
        if (bound > *cbuf_n) {
            llm_free(*cbuf);
            if (!(*cbuf = llm_malloc(bound))) {
                *cbuf_n = 0;
                return LLM_E_NOMEM;
            }
            *cbuf_n = bound;
        }
        size_t c = ZSTD_compress2(cctx, *cbuf, bound, bytes, n);
        if (ZSTD_isError(c))
            return llm_error_set(LLM_E_IO, "%s: tensor '%s': zstd: %s", w->path ? w->path : "<stdout>",
                                 t->name, ZSTD_getErrorName(c));
        if (c < n) { /* keep the compressed form only when it is smaller */
            e->compression = LLM_COMPRESS_ZSTD;
            e->stored = c;
            bytes = *cbuf;
        }
    }
    return llm_out_write(w, bytes, (size_t)e->stored);
}

llm_status llm_llm_write(struct llm_file *f, const char *path, const struct llm_write_opts *o)
{
    struct llm_write_opts def;
    if (!o) {
        llm_write_opts_default(&def);
        o = &def;
    }
    if (o->convert)
        LLM_TRY(llm_file_convert(f, o->type));
    if (o->compress_level < 0 || o->compress_level > ZSTD_maxCLevel())
        return llm_error_set(LLM_E_INVALID, "compression level %d out of range 1..%d",
                             o->compress_level, ZSTD_maxCLevel());

    char *yaml = NULL;
    size_t ylen = 0;
    LLM_TRY(llm_meta_emit_yaml(f->meta, &yaml, &ylen));

    struct llm_out w;
    struct entry *ents = llm_calloc(f->n_tensors ? f->n_tensors : 1, sizeof *ents);
    void *scratch = NULL, *cbuf = NULL;
    size_t scratch_n = 0, cbuf_n = 0;
    uint8_t *index = NULL;
    ZSTD_CCtx *cctx = NULL;
    llm_status s;
    if (!ents) {
        llm_free(yaml);
        return LLM_E_NOMEM;
    }
    if ((s = llm_out_open(&w, path))) {
        llm_free(yaml);
        llm_free(ents);
        return s;
    }
    if (o->compress_level > 0) {
        cctx = ZSTD_createCCtx();
        if (!cctx) {
            s = LLM_E_NOMEM;
            goto fail;
        }
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, o->compress_level);
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        /* no error if this libzstd was built without threads: it stays serial */
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, ncpu > 1 ? (int)ncpu : 0);
    }

    uint8_t hdr[HEADER_SIZE] = { 0 };
    memcpy(hdr, LLM_MAGIC, 8);
    llm_put32(hdr + 8, LLM_VERSION_1);
    llm_put32(hdr + 12, HEADER_SIZE);
    llm_put64(hdr + 16, o->compress_level > 0 ? FEATURE_ZSTD : 0);
    llm_put64(hdr + 24, HEADER_SIZE);
    llm_put64(hdr + 32, ylen);
    llm_put64(hdr + 40, XXH3_64bits(yaml, ylen));
    llm_put32(hdr + 48, ALIGNMENT);
    llm_put64(hdr + 56, XXH3_64bits(hdr, 56));
    if ((s = llm_out_write(&w, hdr, sizeof hdr)) || (s = llm_out_write(&w, yaml, ylen)))
        goto fail;

    size_t idx_size = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *t = &f->tensors[i];
        if ((s = llm_out_pad(&w, ALIGNMENT)))
            goto fail;
        s = write_tensor(f, t, &w, cctx, o->compress_level, &scratch, &scratch_n, &cbuf, &cbuf_n,
                         &ents[i]);
        if (s) {
            /* an error about the output or the input names its file; others
             * (a fill that failed) get the tensor's name and the output's */
            const char *shown = strcmp(path, "-") ? path : "<stdout>", *d = llm_error_detail(s);
            if (strncmp(d, shown, strlen(shown)) != 0 && strncmp(d, f->path, strlen(f->path)) != 0) {
                if (!strstr(d, t->name)) {
                    char pre[LLM_MAX_NAME + 16];
                    snprintf(pre, sizeof pre, "tensor '%s'", t->name);
                    llm_error_prefix(pre);
                }
                llm_error_prefix(shown);
            }
            goto fail;
        }
        idx_size += 4 + strlen(t->name) + INDEX_FIXED;
    }
    if ((s = llm_out_pad(&w, ALIGNMENT)))
        goto fail;
    uint64_t idx_off = w.pos;
    if (!(index = llm_malloc(idx_size ? idx_size : 1))) {
        s = LLM_E_NOMEM;
        goto fail;
    }
    uint8_t *p = index;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct llm_tensor *t = &f->tensors[i];
        uint32_t nlen = (uint32_t)strlen(t->name);
        llm_put32(p, nlen);
        memcpy(p + 4, t->name, nlen);
        p += 4 + nlen;
        llm_put32(p, t->type);
        llm_put32(p + 4, t->n_dims);
        llm_put32(p + 8, t->flags & KNOWN_TENSOR_FLAGS);
        llm_put32(p + 12, ents[i].compression);
        for (int k = 0; k < 4; k++)
            llm_put64(p + 16 + 8 * k, (uint64_t)t->ne[k]);
        llm_put64(p + 48, ents[i].offset);
        llm_put64(p + 56, ents[i].stored);
        llm_put64(p + 64, t->nbytes);
        llm_put64(p + 72, ents[i].checksum);
        p += INDEX_FIXED;
    }
    if ((s = llm_out_write(&w, index, idx_size)))
        goto fail;
    uint8_t tr[TRAILER_SIZE] = { 0 };
    memcpy(tr, TRAILER_MAGIC, 8);
    llm_put64(tr + 8, idx_off);
    llm_put64(tr + 16, idx_size);
    llm_put64(tr + 24, f->n_tensors);
    llm_put64(tr + 32, XXH3_64bits(index, idx_size));
    llm_put64(tr + 40, w.pos + TRAILER_SIZE);
    llm_put64(tr + 56, XXH3_64bits(tr, 56));
    if ((s = llm_out_write(&w, tr, sizeof tr)))
        goto fail;
    s = llm_out_commit(&w);
    goto out;
fail:
    llm_out_abort(&w);
out:
    ZSTD_freeCCtx(cctx);
    llm_free(yaml);
    llm_free(ents);
    llm_free(scratch);
    llm_free(cbuf);
    llm_free(index);
    return s;
}
