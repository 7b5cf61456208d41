/* convert.h: other ways to say what text is allowed, turned into GBNF
 * (then parsed by llm_grammar_parse like any grammar file). */
#ifndef LLM_GRAMMAR_CONVERT_H
#define LLM_GRAMMAR_CONVERT_H

#include <stddef.h>

#include "../common/status.h"

/* A regular expression (len bytes) that the whole text must match, as a
 * grammar with one rule, root (*gbnf malloc'd). LLM_E_UNSUPPORTED names
 * what cannot be enforced (back-references, lookaround, \b) and where;
 * `name` heads the message. */
llm_status llm_regex_to_gbnf(const char *re, size_t len, const char *name, char **gbnf);

/* A JSON Schema (len bytes of JSON) as a grammar whose texts are JSON
 * documents that validate against it. LLM_E_FORMAT for text that is not
 * JSON or not a schema; LLM_E_UNSUPPORTED naming a keyword that cannot be
 * enforced, with its place ("NAME: #/properties/a: 'not' cannot be
 * enforced"). */
llm_status llm_schema_to_gbnf(const char *json, size_t len, const char *name, char **gbnf);

#endif
