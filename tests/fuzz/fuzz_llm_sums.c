/* fuzz_llm_sums.c: .llm files whose checksums are right, so that mutations
 * reach what lies behind them.
 *
 * A fuzzer that flips bytes of a .llm file almost never gets past the
 * checksums: a changed tensor byte is a checksum mismatch at its first use,
 * and fuzz builds skip only the structural checksums. The custom mutator
 * below mutates, then recomputes every checksum (each tensor's, decompressed
 * when stored compressed; the metadata's, the index's, the header's and the
 * trailer's, and the trailer's file size), so that the inputs are files a
 * writer could have made: they reach the checks of the values (NaN and
 * infinite weights), the model's binding (shapes, types, permutations), the
 * tokenizer and a short forward pass.
 *
 * The same input then has one byte of a tensor flipped without fixing its
 * checksum: that must be detected at the first use (or, for a compressed
 * tensor, by zstd), and not leak into a copy. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "../../lib/common/alloc.h"
#include "../../lib/format/import.h"
#include "../../lib/model/model.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* A tensor's place and its index record, as far as the layout holds. */
struct rec {
    uint64_t off, stored, nbytes;
    uint32_t comp;
    uint8_t *sum; /* the checksum field in the index */
};

/* Walk the index; returns the number of records (at most `max`), or -1
 * when the layout is too broken to walk. */
static int walk(uint8_t *d, size_t size, struct rec *r, int max)
{
    if (size < 128 || memcmp(d, "\x89LLM\r\n\x1a\n", 8) != 0)
        return -1;
    uint8_t *tr = d + size - 64;
    uint64_t idx_off = get64(tr + 8), idx_size = get64(tr + 16), n = get64(tr + 24);
    if (idx_off > size - 64 || idx_size > size - 64 - idx_off)
        return -1;
    uint8_t *p = d + idx_off, *end = p + idx_size;
    int k = 0;
    for (uint64_t i = 0; i < n && k < max; i++) {
        if (end - p < 4)
            return k;
        uint32_t nlen = get32(p);
        if (nlen > 255 || (uint64_t)(end - p) < 4 + (uint64_t)nlen + 80)
            return k;
        p += 4 + nlen;
        r[k].comp = get32(p + 12);
        r[k].off = get64(p + 48);
        r[k].stored = get64(p + 56);
        r[k].nbytes = get64(p + 64);
        r[k].sum = p + 72;
        k++;
        p += 80;
    }
    return k;
}

/* Recompute every checksum of the file in place. */
static void fix_sums(uint8_t *d, size_t size)
{
    struct rec r[512];
    int n = walk(d, size, r, 512);
    if (n < 0)
        return;
    for (int i = 0; i < n; i++) {
        if (r[i].off > size || r[i].stored > size - r[i].off)
            continue;
        const uint8_t *s = d + r[i].off;
        if (r[i].comp == 0) {
            put64(r[i].sum, XXH3_64bits(s, (size_t)r[i].stored));
        } else if (r[i].nbytes <= (1u << 22)) {
            void *buf = malloc(r[i].nbytes ? (size_t)r[i].nbytes : 1);
            size_t got = buf ? ZSTD_decompress(buf, (size_t)r[i].nbytes, s, (size_t)r[i].stored) : 0;
            if (buf && !ZSTD_isError(got))
                put64(r[i].sum, XXH3_64bits(buf, got));
            free(buf);
        }
    }
    uint64_t meta_size = get64(d + 32);
    if (meta_size <= size - 64)
        put64(d + 40, XXH3_64bits(d + 64, (size_t)meta_size));
    put64(d + 56, XXH3_64bits(d, 56));
    uint8_t *tr = d + size - 64;
    uint64_t idx_off = get64(tr + 8), idx_size = get64(tr + 16);
    if (idx_off <= size - 64 && idx_size <= size - 64 - idx_off)
        put64(tr + 32, XXH3_64bits(d + idx_off, (size_t)idx_size));
    put64(tr + 40, size);
    put64(tr + 56, XXH3_64bits(tr, 56));
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    (void)seed;
    size = LLVMFuzzerMutate(data, size, max_size);
    fix_sums(data, size);
    return size;
}

/* Bind the model and run two tokens through it. */
static void run_model(struct llm_file *f)
{
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = 1;
    if (llm_model_from_file_borrowed(&m, f, &mp) != LLM_OK)
        return;
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 4;
    cp.block_size = 2;
    int32_t nv = llm_model_config(m)->n_vocab;
    if (nv > 0 && nv <= (1 << 16) && llm_context_new(&c, m, &cp) == LLM_OK) {
        float *logits = malloc((size_t)nv * 2 * sizeof(float));
        int32_t tok[2] = { 1 % nv, 2 % nv };
        if (logits)
            (void)llm_decode(c, 0, tok, 2, 0, logits, 1);
        free(logits);
        llm_context_free(c);
    }
    llm_model_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    struct llm_file *f = NULL;
    if (llm_llm_parse(&f, data, size, "fuzz.llm", NULL) != LLM_OK)
        return 0;
    /* every tensor is checked at its first use; then the model */
    for (size_t i = 0; i < f->n_tensors; i++) {
        const void *p;
        (void)llm_tensor_bytes(f, &f->tensors[i], &p);
    }
    run_model(f);
    llm_file_free(f);

    /* one byte of a tensor stored plain changed, its checksum not: the
     * first use must see it */
    uint8_t *copy = malloc(size ? size : 1);
    struct rec r[512];
    int n;
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    struct llm_import_opts io;
    llm_import_opts_default(&io);
    io.nonfinite = LLM_FINITE_IGNORE; /* only the checksum decides here */
    if ((n = walk(copy, size, r, 512)) > 0) {
        const struct rec *t = &r[XXH3_64bits(data, size) % (uint64_t)n];
        int i = (int)(t - r), good = 0;
        const void *p;
        if (t->comp == 0 && t->stored && t->off >= 64 && t->off <= size &&
            t->stored <= size - t->off && llm_llm_parse(&f, copy, size, "fuzz.llm", &io) == LLM_OK) {
            /* record i is tensor i when the file parses */
            good = (size_t)i < f->n_tensors && f->tensors[i].offset == t->off &&
                   llm_tensor_bytes(f, &f->tensors[i], &p) == LLM_OK;
            llm_file_free(f);
        }
        if (good) {
            copy[t->off + XXH3_64bits(data, size / 2) % t->stored] ^= 0x21;
            if (llm_llm_parse(&f, copy, size, "fuzz.llm", &io) == LLM_OK) {
                if (llm_tensor_bytes(f, &f->tensors[i], &p) == LLM_OK)
                    abort(); /* a changed byte went through the checks */
                llm_file_free(f);
            }
        }
    }
    free(copy);
    return 0;
}
