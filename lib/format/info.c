/* info.c: print a model's metadata, tensor table and totals (llm-convert
 * --info) as YAML or JSON. */
#include <inttypes.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "import.h"
#include "info.h"

#include <xxhash.h>

static llm_status print(FILE *o, struct llm_file *f, int json, const uint64_t *sums);

static void shape(FILE *o, const struct llm_tensor *t)
{
    fputc('[', o);
    for (uint32_t k = 0; k < t->n_dims; k++)
        fprintf(o, "%s%" PRId64, k ? ", " : "", t->ne[k]);
    fputc(']', o);
}

static const char *comp_name(uint32_t c)
{
    return c == LLM_COMPRESS_ZSTD ? "zstd" : "none";
}

/* XXH3-64 of each tensor's bytes (decompressed or converted as needed). */
static llm_status checksums(struct llm_file *f, uint64_t *sums)
{
    void *scratch = NULL;
    size_t cap = 0;
    llm_status s = LLM_OK;
    for (size_t i = 0; i < f->n_tensors && !s; i++) {
        struct llm_tensor *t = &f->tensors[i];
        const void *p;
        if ((s = llm_tensor_peek(f, t, &p))) /* a stored checksum is compared there */
            break;
        if (!p) {
            if (t->nbytes > cap) {
                llm_free(scratch);
                cap = (size_t)t->nbytes;
                if (!(scratch = llm_malloc(cap)))
                    return LLM_E_NOMEM;
            }
            if ((s = llm_tensor_read(f, t, scratch)))
                break;
            p = scratch;
        }
        /* the bytes were compared with the checksum stored with them */
        int known = t->stored && t->checked && (f->check_sums || t->compression);
        sums[i] = known ? t->checksum : XXH3_64bits(p, (size_t)t->nbytes);
        if (t->stored && sums[i] != t->checksum)
            s = llm_error_set(LLM_E_CHECKSUM, "%s: tensor '%s': checksum mismatch (corrupt data)",
                              f->path, t->name);
    }
    llm_free(scratch);
    return s;
}

llm_status llm_info_print(FILE *o, struct llm_file *f, int json, int with_sums)
{
    uint64_t *sums = NULL;
    if (with_sums) {
        if (!(sums = llm_calloc(f->n_tensors ? f->n_tensors : 1, sizeof *sums)))
            return LLM_E_NOMEM;
        llm_status s = checksums(f, sums);
        if (s) {
            llm_free(sums);
            return s;
        }
    }
    llm_status st = print(o, f, json, sums);
    llm_free(sums);
    return st;
}

static llm_status print(FILE *o, struct llm_file *f, int json, const uint64_t *sums)
{
    uint64_t params, bytes, aux = 0;
    size_t n_aux = 0;
    llm_file_totals(f, &params, &bytes);
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].flags & LLM_TENSOR_AUX) {
            aux += f->tensors[i].nbytes;
            n_aux++;
        }
    double bpw = params ? 8.0 * (double)bytes / (double)params : 0;

    if (json) {
        fputs("{\n  \"file\": ", o);
        llm_json_string(o, f->path, strlen(f->path));
        fputs(",\n  \"format\": ", o);
        llm_json_string(o, f->format, strlen(f->format));
        fprintf(o, ",\n  \"format_version\": %u,\n  \"metadata\": ", f->src_version);
        LLM_TRY(llm_meta_write_json(f->meta, o, 1));
        fputs(",\n  \"tensors\": [", o);
        for (size_t i = 0; i < f->n_tensors; i++) {
            const struct llm_tensor *t = &f->tensors[i];
            fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", o);
            llm_json_string(o, t->name, strlen(t->name));
            fprintf(o, ", \"type\": \"%s\", \"shape\": ", llm_type_name(t->type));
            shape(o, t);
            fprintf(o, ", \"bytes\": %" PRIu64, t->nbytes);
            if (t->stored)
                fprintf(o, ", \"stored_bytes\": %" PRIu64 ", \"compression\": \"%s\"", t->stored_size,
                        comp_name(t->compression));
            if (sums)
                fprintf(o, ", \"xxh3\": \"%016" PRIx64 "\"", sums[i]);
            fprintf(o, ", \"aux\": %s}", t->flags & LLM_TENSOR_AUX ? "true" : "false");
        }
        fprintf(o, "%s],\n  \"totals\": {\"tensors\": %zu, \"parameters\": %" PRIu64
                   ", \"bytes\": %" PRIu64 ", \"aux_tensors\": %zu, \"aux_bytes\": %" PRIu64
                   ", \"bits_per_weight\": %.4f}\n}\n",
                f->n_tensors ? "\n  " : "", f->n_tensors - n_aux, params, bytes, n_aux, aux, bpw);
        return llm_stream_status(o);
    }

    /* YAML: the metadata document, then the tensor table and totals, all
       valid YAML so that a script may parse it too. */
    char *yaml;
    size_t ylen;
    LLM_TRY(llm_meta_emit_yaml(f->meta, &yaml, &ylen));
    fputs("file: ", o);
    llm_json_string(o, f->path, strlen(f->path));
    fprintf(o, "\nformat: %s\nformat_version: %u\nmetadata:\n", f->format, f->src_version);
    /* indent the metadata document under "metadata:" */
    const char *p = yaml;
    if (!strncmp(p, "---", 3)) {
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + ylen;
    }
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (!(n == 3 && !strncmp(p, "...", 3)))
            fprintf(o, "  %.*s\n", (int)n, p);
        p += n + (nl ? 1 : 0);
    }
    llm_free(yaml);
    fputs("tensors:\n", o);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct llm_tensor *t = &f->tensors[i];
        fputs("  - {name: ", o);
        llm_json_string(o, t->name, strlen(t->name));
        fprintf(o, ", type: %s, shape: ", llm_type_name(t->type));
        shape(o, t);
        fprintf(o, ", bytes: %" PRIu64, t->nbytes);
        if (t->stored && t->compression)
            fprintf(o, ", stored: %" PRIu64 ", compression: %s", t->stored_size,
                    comp_name(t->compression));
        if (sums)
            fprintf(o, ", xxh3: \"%016" PRIx64 "\"", sums[i]);
        if (t->flags & LLM_TENSOR_AUX)
            fputs(", aux: true", o);
        fputs("}\n", o);
    }
    fprintf(o,
            "totals:\n  tensors: %zu\n  parameters: %" PRIu64 "\n  bytes: %" PRIu64
            "\n  aux_tensors: %zu\n  aux_bytes: %" PRIu64 "\n  bits_per_weight: %.4f\n",
            f->n_tensors - n_aux, params, bytes, n_aux, aux, bpw);
    return llm_stream_status(o);
}
