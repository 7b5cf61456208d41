/* load.c: the grammar an option names: a GBNF file, a JSON Schema file, a
 * regular expression, or any JSON value. */
#include <string.h>

#include "../common/alloc.h"
#include "../common/io.h"
#include "convert.h"
#include "grammar.h"

#define GRAMMAR_MAX_FILE ((size_t)1 << 24)

llm_status llm_grammar_load(struct llm_grammar **out, enum llm_grammar_kind kind,
                            const char *arg)
{
    *out = NULL;
    char *text = NULL, *src = NULL;
    size_t len = 0;
    const char *name = arg;
    llm_status s = LLM_OK;
    switch (kind) {
    case LLM_GRAMMAR_GBNF:
        s = llm_read_file(arg, GRAMMAR_MAX_FILE, &text, &len);
        break;
    case LLM_GRAMMAR_SCHEMA:
        if (!(s = llm_read_file(arg, GRAMMAR_MAX_FILE, &src, &len)))
            s = llm_schema_to_gbnf(src, len, arg, &text);
        break;
    case LLM_GRAMMAR_REGEX:
        name = "--regex";
        s = llm_regex_to_gbnf(arg, strlen(arg), name, &text);
        break;
    case LLM_GRAMMAR_JSON:
        name = "--json-object";
        s = (text = llm_strdup(llm_grammar_json)) ? LLM_OK : LLM_E_NOMEM;
        break;
    }
    llm_free(src);
    if (!s && kind != LLM_GRAMMAR_GBNF)
        len = strlen(text);
    if (!s)
        s = llm_grammar_parse(out, text, len, name);
    llm_free(text);
    return s;
}
