/* fuzz_hf_quant.c: libFuzzer target for the GPTQ/AWQ part of the Hugging
 * Face importer (hf_quant.c). The first byte picks the quantization config
 * (method, bits, group, checkpoint_format, Q/K rows) and the shape of every
 * linear layer; the rest is a safetensors image whose *.qweight, *.qzeros,
 * *.scales and *.g_idx tensors are handed over as hf.c does. Every weight
 * that passes the checks is then made, so the unpacking runs too. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../lib/common/alloc.h"
#include "../../lib/format/file.h"
#include "../../lib/format/hf.h"
#include "../../lib/format/hf_quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct ctx {
    struct llm_hfq *q;
    int64_t in, out;
    uint64_t heads;
};

static llm_status part(const struct llm_st_entry *e, void *vctx)
{
    struct ctx *c = vctx;
    size_t blen;
    int p = llm_hfq_part(e->name, &blen);
    if (p < 0 || blen > 200)
        return LLM_OK;
    char gguf[LLM_MAX_NAME];
    snprintf(gguf, sizeof gguf, "%.*s.weight", (int)blen, e->name);
    return llm_hfq_add(c->q, e, p, "fuzz.safetensors", gguf, c->in, c->out, c->heads, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    /* bit 64: 3 bits, whose packing needs dimensions of multiples of 32;
     * otherwise bits 16 and 32 give 44 inputs and 12 outputs, the shapes
     * GPTQModel packs into a zero-padded last word */
    const int b3 = sel & 64;
    json_t *cfg = json_pack("{s:{s:s, s:i, s:i, s:s}}", "quantization_config", "quant_method",
                            sel & 1 ? "awq" : "gptq", "bits", b3 ? 3 : sel & 2 ? 8 : 4,
                            "group_size", sel & 4 ? -1 : 32, "checkpoint_format",
                            sel & 8 ? "gptq_v2" : "gptq");
    struct ctx c = { .in = sel & 16 ? (b3 ? 32 : 44) : 64,
                     .out = b3 ? (sel & 32 ? 32 : 64) : (sel & 32 ? 12 : 16),
                     .heads = sel >> 7 };
    struct llm_file *f = NULL;
    if (!cfg || llm_hfq_new(&c.q, cfg, "/nonexistent") != LLM_OK || !c.q ||
        llm_file_new(&f, "fuzz", "hf") != LLM_OK)
        goto out;
    if (llm_st_scan(data + 1, size - 1, "fuzz.safetensors", NULL, part, &c) != LLM_OK ||
        llm_hfq_finish(c.q, f) != LLM_OK)
        goto out;
    for (size_t i = 0; i < llm_hfq_count(c.q); i++) {
        struct llm_hfq_tensor t;
        struct llm_tensor *lt;
        llm_hfq_tensor(c.q, i, &t);
        if (llm_file_add_tensor(f, t.name, t.type, t.n_dims, t.ne, t.data, &lt) != LLM_OK)
            continue;
        lt->fill = t.fill;
        lt->fill_ctx = t.fill_ctx;
        void *buf = llm_malloc(lt->nbytes ? (size_t)lt->nbytes : 1);
        /* the checks passed, so making the weight cannot fail */
        if (buf && llm_tensor_read(f, lt, buf) != LLM_OK)
            __builtin_trap();
        llm_free(buf);
    }
out:
    llm_hfq_free(c.q);
    llm_file_free(f);
    json_decref(cfg);
    return 0;
}
