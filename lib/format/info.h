/* info.h: llm-convert --info. */
#ifndef LLM_FORMAT_INFO_H
#define LLM_FORMAT_INFO_H

#include <stdio.h>

#include "file.h"

/* Print file, format, metadata, one line per tensor (name, type, shape,
 * bytes) and totals (tensors, parameters, bytes, bits per weight; auxiliary
 * tokenizer arrays are counted apart). YAML, or JSON when `json`. With
 * `checksums`, each tensor's XXH3-64 too (reads every tensor; for a .llm file
 * the stored checksums are verified on the way). */
llm_status llm_info_print(FILE *o, struct llm_file *f, int json, int checksums);

#endif
