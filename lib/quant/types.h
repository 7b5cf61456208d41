/* types.h: what each llm_type is (name, block size, bytes) and the size of
 * a row and of a tensor of that type. See blocks.h for the layouts. */
#ifndef LLM_QUANT_TYPES_H
#define LLM_QUANT_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "blocks.h"

struct llm_type_traits {
    const char *name;      /* "f16", "q4_0", ...; NULL for an unused id */
    uint32_t blck;         /* elements per block (0: the whole row, see _ch types) */
    uint32_t block_bytes;  /* bytes per block */
    uint32_t row_header;   /* bytes before the first block of each row */
    uint8_t is_quant;      /* a quantized weight type */
    uint8_t is_aux;        /* an integer array type for auxiliary sections */
    int8_t ggml_type;      /* the GGML type id with the same bytes, or -1 */
    const char *desc;      /* one line for --help and --info */
};

/* Traits of `t`, or NULL for an id that is not a type. */
const struct llm_type_traits *llm_type_traits(uint32_t t);
const char *llm_type_name(uint32_t t); /* "?" for an unknown id */

/* Parse a type name (case-insensitive; aliases q8_g32 = q8_0, q4_g32 = q4_0,
 * q4z_g32 = q4_1, fp8 = fp8_e4m3). LLM_E_INVALID with a detail listing the
 * names when unknown. */
llm_status llm_type_parse(const char *name, enum llm_type *out);

/* Comma-separated list of every type name (for messages and --help). */
const char *llm_type_names(void);

/* Whether rows of t must hold whole blocks (the GGUF layouts from
 * LLM_TYPE_Q5_0 on: llama.cpp reads no padding). */
int llm_type_whole_blocks(enum llm_type t);

/* Bytes of one row of `ne0` elements; 0 on overflow. */
uint64_t llm_type_row_bytes(enum llm_type t, uint64_t ne0);

/* Bytes of a tensor; LLM_E_FORMAT on overflow or a bad shape. */
llm_status llm_type_tensor_bytes(enum llm_type t, uint32_t n_dims, const int64_t *ne,
                                 uint64_t *out);

/* Bits per weight of a row of ne0 elements (for --info). */
double llm_type_bpw(enum llm_type t, uint64_t ne0);

/* The llm_type with the bytes of GGML type id `g`, or -1. */
int llm_type_from_ggml(uint32_t g);

#endif
