/* gguf_impl.h: what the GGUF reader (gguf.c) and writer (gguf_write.c)
 * share. Not part of the public API.
 *
 * Kept keys: GGUF keys that have no place in our schema are kept under the
 * `gguf` map as metadata scalars and sequences. The writer gives each one
 * back the GGUF type llm_gguf_infer_type() infers from the node (ints as
 * UINT32 when they fit, else INT32 / INT64 / UINT64; floats as FLOAT32 when
 * marked f32; integer arrays as INT32, as gguf-py writes them). Where the
 * source type differs from the inferred one, the reader records it under
 * `source.gguf_types.<key>` ("u16", "i32", "f64", "u8[]", ...), so that a
 * GGUF -> .llm -> GGUF round trip gives every key its original type.
 */
#ifndef LLM_FORMAT_GGUF_IMPL_H
#define LLM_FORMAT_GGUF_IMPL_H

#include <stdint.h>

#include "../common/status.h"
#include "meta.h"

#define LLM_GGUF_MAGIC 0x46554747u /* "GGUF" read as little-endian */
#define LLM_GGUF_VERSION 3u
#define LLM_GGUF_DEFAULT_ALIGNMENT 32u
#define LLM_GGUF_MAX_NAME 63u      /* llama.cpp: name length < GGML_MAX_NAME (64) */
#define LLM_GGUF_MAX_KEY 65535u    /* spec */

/* GGUF metadata value types (gguf.h enum gguf_type). */
enum {
    LLM_GGUF_U8 = 0,
    LLM_GGUF_I8 = 1,
    LLM_GGUF_U16 = 2,
    LLM_GGUF_I16 = 3,
    LLM_GGUF_U32 = 4,
    LLM_GGUF_I32 = 5,
    LLM_GGUF_F32 = 6,
    LLM_GGUF_BOOL = 7,
    LLM_GGUF_STR = 8,
    LLM_GGUF_ARR = 9,
    LLM_GGUF_U64 = 10,
    LLM_GGUF_I64 = 11,
    LLM_GGUF_F64 = 12,
    LLM_GGUF_NTYPES_ = 13
};

/* Bytes of a scalar value type (0 for STR, ARR and unknown ids). */
unsigned llm_gguf_scalar_size(uint32_t t);
/* Short name of a value type: "u8", ..., "str", "arr"; NULL when unknown. */
const char *llm_gguf_type_name(uint32_t t);

/* The GGUF type the writer gives a kept metadata node: *type, and for a
 * sequence *elem (the element type). LLM_E_INVALID (no detail) for a node
 * that has no GGUF form (a map, null, a mixed or nested sequence). */
llm_status llm_gguf_infer_type(const struct llm_meta *m, uint32_t *type, uint32_t *elem);

/* Parse a recorded type ("u16" or "u8[]") into (type, elem); 0 on a bad
 * name. */
int llm_gguf_parse_type_name(const char *s, uint32_t *type, uint32_t *elem);

/* RoPE pairing GGUF files of architecture `arch` use (formats.md §1.10):
 * "norm", "neox" or NULL when the architecture has no rotary embedding or
 * is unknown to us. */
const char *llm_gguf_arch_rope_type(const char *arch);

#endif
