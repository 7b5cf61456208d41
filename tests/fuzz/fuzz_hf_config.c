/* fuzz_hf_config.c: libFuzzer target for the Hugging Face importer's
 * config.json (lib/format/hf.c): the input is the config of a directory
 * whose model.safetensors holds no tensor, so every key the importer reads
 * (architectures, heads, RoPE parameters, windows, Gemma's layer types and
 * soft-caps, the experts) is parsed and checked before the weights are
 * found missing. Nothing may crash; every refusal is a status. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../lib/format/file.h"
#include "../../lib/format/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void put(const char *name, const void *p, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        abort();
    if (n && fwrite(p, 1, n, fp) != n)
        abort();
    fclose(fp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/fuzz-hf-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir))
            abort();
        /* a safetensors file of no tensors: an 8-byte length, then "{}" */
        static const uint8_t empty[10] = { 2, 0, 0, 0, 0, 0, 0, 0, '{', '}' };
        put("model.safetensors", empty, sizeof empty);
    }
    put("config.json", data, size);
    struct llm_file *f = NULL;
    if (llm_hf_open(&f, dir, NULL) == LLM_OK) /* no tensors: never */
        abort();
    if (f)
        abort();
    return 0;
}
