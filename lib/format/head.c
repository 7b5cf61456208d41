/* head.c: checks of a model's first bytes, for input that is not a
 * regular file (a pipe, a device): such input is copied to a temporary file
 * before it is parsed (the formats need random access), and without these
 * checks /dev/zero or /dev/urandom filled TMPDIR at the speed of the copy
 * (6 GB in 5 s) before a parser saw that the first byte was wrong.
 *
 * The format is told from the first bytes as llm_import tells it; the
 * format's check then looks at its header and stops at the first
 * inconsistency. GGUF, safetensors and llama2.c headers give the size of the
 * whole file, where the copy stops (see llm_map_check_fn); a .llm file keeps
 * its index at its end, so once its header and metadata check out it is
 * copied to its end. The parsers still check everything once it is mapped.
 */
#include <jansson.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../quant/ggml_quants.h"
#include "gguf_impl.h"
#include "import.h"

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* ---- GGUF: walk the metadata records and tensor infos ------------------ */

/* The walk restarts from byte 0 at every call (the spool at least doubles
 * the head between calls, so that is O(n log n) in all); NEED(k) returns
 * asking for the k bytes at pos when they are not there yet. */
#define NEED(k)                                                                        \
    do {                                                                               \
        uint64_t end_;                                                                 \
        if (!llm_add_ok(pos, (k), &end_))                                              \
            return llm_error_set(LLM_E_FORMAT, "%s: %s: sizes overflow", name, what);  \
        if (end_ > n) {                                                                \
            *need = end_;                                                              \
            return eof ? llm_error_set(LLM_E_FORMAT, "%s: %s: truncated (at byte %llu " \
                                       "of %zu)", name, what, (unsigned long long)pos, n) \
                       : LLM_OK;                                                       \
        }                                                                              \
    } while (0)

llm_status llm_gguf_head(const uint8_t *d, size_t n, int eof, uint64_t *need, uint64_t *size,
                         const char *name)
{
    uint64_t pos = 0;
    const char *what = "header";
    char buf[64];
    *size = 0;
    NEED(24);
    if (le32(d) != LLM_GGUF_MAGIC)
        return llm_error_set(LLM_E_FORMAT, "%s: not a GGUF file (bad magic)", name);
    uint32_t version = le32(d + 4);
    if (version != 2 && version != 3)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 "
                             "are)", name, version);
    uint64_t n_tensors = le64(d + 8), n_kv = le64(d + 16);
    uint32_t alignment = LLM_GGUF_DEFAULT_ALIGNMENT;
    pos = 24;
    for (uint64_t i = 0; i < n_kv; i++) {
        snprintf(buf, sizeof buf, "metadata record %llu", (unsigned long long)i);
        what = buf;
        NEED(8);
        uint64_t klen = le64(d + pos);
        if (klen == 0 || klen > LLM_GGUF_MAX_KEY)
            return llm_error_set(LLM_E_FORMAT, "%s: metadata record %llu: bad key length %llu",
                                 name, (unsigned long long)i, (unsigned long long)klen);
        pos += 8;
        NEED(klen + 4);
        int is_align = klen == 17 && memcmp(d + pos, "general.alignment", 17) == 0;
        pos += klen;
        uint32_t type = le32(d + pos);
        pos += 4;
        if (type == LLM_GGUF_STR) {
            NEED(8);
            uint64_t len = le64(d + pos);
            pos += 8;
            NEED(len);
            pos += len;
        } else if (type == LLM_GGUF_ARR) {
            NEED(12);
            uint32_t et = le32(d + pos);
            uint64_t count = le64(d + pos + 4);
            pos += 12;
            if (et == LLM_GGUF_STR) {
                for (uint64_t j = 0; j < count; j++) { /* each takes 8 bytes at least */
                    NEED(8);
                    uint64_t len = le64(d + pos);
                    pos += 8;
                    NEED(len);
                    pos += len;
                }
            } else {
                uint64_t bytes;
                unsigned sz = llm_gguf_scalar_size(et);
                if (!sz)
                    return llm_error_set(LLM_E_FORMAT, "%s: metadata record %llu: unknown array "
                                         "element type %u", name, (unsigned long long)i, et);
                if (!llm_mul_ok(count, sz, &bytes))
                    return llm_error_set(LLM_E_FORMAT, "%s: metadata record %llu: array of %llu "
                                         "values overflows", name, (unsigned long long)i,
                                         (unsigned long long)count);
                NEED(bytes);
                pos += bytes;
            }
        } else {
            unsigned sz = llm_gguf_scalar_size(type);
            if (!sz)
                return llm_error_set(LLM_E_FORMAT, "%s: metadata record %llu: unknown value type "
                                     "%u", name, (unsigned long long)i, type);
            NEED(sz);
            if (is_align && type == LLM_GGUF_U32) {
                alignment = le32(d + pos);
                if (alignment == 0 || (alignment & (alignment - 1)))
                    return llm_error_set(LLM_E_FORMAT, "%s: general.alignment %u is not a power "
                                         "of two", name, alignment);
            }
            pos += sz;
        }
    }
    uint64_t data_end = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        snprintf(buf, sizeof buf, "tensor info %llu", (unsigned long long)i);
        what = buf;
        NEED(8);
        uint64_t nlen = le64(d + pos);
        if (nlen == 0 || nlen >= LLM_MAX_NAME)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor info %llu: bad name length %llu", name,
                                 (unsigned long long)i, (unsigned long long)nlen);
        pos += 8;
        NEED(nlen + 4);
        pos += nlen;
        uint32_t nd = le32(d + pos);
        pos += 4;
        if (nd < 1 || nd > LLM_MAX_DIMS)
            return llm_error_set(LLM_E_FORMAT, "%s: tensor info %llu: %u dimensions (1..%d "
                                 "allowed)", name, (unsigned long long)i, nd, LLM_MAX_DIMS);
        NEED(8 * (uint64_t)nd + 12);
        uint64_t ne0 = le64(d + pos), rows = 1, bytes, end;
        for (uint32_t k = 1; k < nd; k++)
            if (!llm_mul_ok(rows, le64(d + pos + 8 * k), &rows))
                return llm_error_set(LLM_E_FORMAT, "%s: tensor info %llu: shape overflows", name,
                                     (unsigned long long)i);
        pos += 8 * (uint64_t)nd;
        uint32_t gtype = le32(d + pos);
        uint64_t offset = le64(d + pos + 4);
        pos += 12;
        uint64_t rb = ne0 ? llm_ggml_row_bytes(gtype, ne0) : 0;
        if (!rb || !rows || !llm_mul_ok(rb, rows, &bytes) || !llm_add_ok(offset, bytes, &end))
            return llm_error_set(LLM_E_FORMAT, "%s: tensor info %llu: bad type %u or shape", name,
                                 (unsigned long long)i, gtype);
        if (end > data_end)
            data_end = end;
    }
    uint64_t data_off = llm_align_up(pos, alignment);
    if (!llm_add_ok(data_off, data_end, size))
        return llm_error_set(LLM_E_FORMAT, "%s: tensor data sizes overflow", name);
    *need = 0;
    return LLM_OK;
}

#undef NEED

/* ---- safetensors: the JSON header gives every tensor's bytes ----------- */

llm_status llm_safetensors_head(const uint8_t *d, size_t n, int eof, uint64_t *need,
                                uint64_t *size, const char *name)
{
    *size = 0;
    if (n < 8) {
        *need = 8;
        return eof ? llm_error_set(LLM_E_FORMAT, "%s: truncated safetensors header", name) : LLM_OK;
    }
    uint64_t hlen = le64(d);
    if (hlen < 2 || hlen > LLM_MAP_HEAD_MAX - 8)
        return llm_error_set(LLM_E_FORMAT, "%s: safetensors header of %llu bytes", name,
                             (unsigned long long)hlen);
    *need = 8 + hlen;
    if (n < *need)
        return eof ? llm_error_set(LLM_E_FORMAT, "%s: safetensors header of %llu bytes, the file "
                                   "has %zu", name, (unsigned long long)hlen, n) : LLM_OK;
    json_error_t err;
    json_t *root = json_loadb((const char *)d + 8, (size_t)hlen, 0, &err);
    if (!json_is_object(root)) {
        json_decref(root);
        return llm_error_set(LLM_E_FORMAT, "%s: safetensors header is not a JSON object", name);
    }
    uint64_t end = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        json_t *off = json_object_get(v, "data_offsets");
        json_t *e = json_array_get(off, 1);
        if (!json_is_integer(e) || json_integer_value(e) < 0) {
            json_decref(root);
            return llm_error_set(LLM_E_FORMAT, "%s: tensor '%s': 'data_offsets' is not [begin, "
                                 "end]", name, key);
        }
        if ((uint64_t)json_integer_value(e) > end)
            end = (uint64_t)json_integer_value(e);
    }
    json_decref(root);
    *size = 8 + hlen + end;
    *need = 0;
    return LLM_OK;
}

/* ---- any model --------------------------------------------------------- */

llm_status llm_model_head_check(const uint8_t *d, size_t n, int eof, uint64_t *need,
                                uint64_t *size, void *ctx)
{
    const char *name = ctx;
    *size = 0;
    /* as llm_import tells the formats apart */
    if (n >= 8 && memcmp(d, "\x89LLM\r\n\x1a\n", 8) == 0)
        return llm_llm_head(d, n, eof, need, size, name);
    if (n >= 4 && memcmp(d, "GGUF", 4) == 0)
        return llm_gguf_head(d, n, eof, need, size, name);
    if (n >= 9 && d[8] == '{')
        return llm_safetensors_head(d, n, eof, need, size, name);
    if ((n >= 4 && le32(d) == 0x616b3432u) || n >= 28)
        return llm_llama2c_head(d, n, eof, need, size, name);
    if (!eof) {
        *need = 28;
        return LLM_OK;
    }
    return llm_error_set(LLM_E_FORMAT, "%s: unknown format (not .llm, GGUF, safetensors or "
                         "llama2.c)", name);
}

llm_status llm_model_map(struct llm_map *m, const char *path)
{
    struct llm_map_check c = { llm_model_head_check,
                               (void *)(strcmp(path, "-") ? path : "<stdin>"), 0 };
    return llm_map_open_checked(m, path, &c);
}

llm_status llm_small_map(struct llm_map *m, const char *path, uint64_t max)
{
    struct llm_map_check c = { NULL, NULL, max };
    return llm_map_open_checked(m, path, &c);
}
