/* calib.c: calibration windows (see calib.h). */
#include "calib.h"

#include <string.h>
#include <xxhash.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "../sample/sample.h"

/* Calibration texts are a few MB; a bound keeps a wrong path (a model file,
 * a device) from being read whole. The text is read as it comes, without a
 * temporary copy, and a NUL byte stops it at once (llm-quantize(1) states
 * the limit). */
#define CALIB_MAX_BYTES ((size_t)1 << 30)

llm_status llm_calib_load(struct llm_calib *c, const struct llm_tokenizer *tok, const char *path,
                          int32_t n, int32_t len, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    if (n <= 0 || len < 2)
        return llm_error_set(LLM_E_INVALID, "calibration needs at least 1 window of 2 tokens "
                             "(asked for %d of %d)", n, len);
    char *text;
    size_t tlen;
    llm_status s = llm_read_text(path, CALIB_MAX_BYTES, &text, &tlen);
    if (s)
        return s;
    c->hash = XXH3_64bits(text, tlen);
    int32_t *ids = NULL;
    size_t nid = 0;
    s = llm_tokenize(tok, text, tlen, 0, &ids, &nid);
    llm_free(text);
    if (s) {
        llm_error_prefix(path);
        return s;
    }
    c->text_tokens = nid;
    if (nid < (size_t)len + 1) {
        llm_free(ids);
        return llm_error_set(LLM_E_INVALID, "%s: the calibration text has %zu tokens; windows "
                             "of %d tokens need at least %d", path, nid, len, len + 1);
    }
    uint64_t total;
    if (!llm_mul_ok((uint64_t)n, (uint64_t)len * sizeof(int32_t), &total) || total > SIZE_MAX) {
        llm_free(ids);
        return llm_error_set(LLM_E_NOMEM, "%d calibration windows of %d tokens are too many", n,
                             len);
    }
    c->tokens = llm_malloc((size_t)total);
    if (!c->tokens) {
        llm_free(ids);
        return LLM_E_NOMEM;
    }
    struct llm_rng rng;
    llm_rng_seed(&rng, seed);
    /* The tokenizer adds BOS when asked to iff the model wants one (as in
     * model/ppl.c). */
    int32_t *b = NULL;
    size_t nb = 0;
    s = llm_tokenize(tok, "", 0, LLM_TOK_ADD_BOS, &b, &nb);
    if (s) {
        llm_free(ids);
        llm_free(c->tokens);
        c->tokens = NULL;
        return s;
    }
    int add_bos = nb > 0;
    int32_t bos = add_bos ? b[0] : -1;
    llm_free(b);
    uint64_t span = nid - (uint64_t)len; /* start offsets 0 .. span-1 leave a token after */
    for (int32_t w = 0; w < n; w++) {
        uint64_t off = llm_rng_next(&rng) % span;
        int32_t *dst = c->tokens + (size_t)w * (size_t)len;
        memcpy(dst, ids + off, (size_t)len * sizeof(int32_t));
        if (add_bos)
            dst[0] = bos;
    }
    llm_free(ids);
    c->n = n;
    c->len = len;
    return LLM_OK;
}

void llm_calib_free(struct llm_calib *c)
{
    llm_free(c->tokens);
    memset(c, 0, sizeof *c);
}
