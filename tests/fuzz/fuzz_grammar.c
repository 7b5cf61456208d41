/* fuzz_grammar.c: the grammar languages of constrained decoding. The first
 * byte picks GBNF (then the automaton runs over the input's own bytes and
 * a prefix of them), a JSON Schema or a regular expression; a schema or an
 * expression that converts must give GBNF that parses (a schema may only
 * fail by left recursion, through "$ref"). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../lib/common/alloc.h"
#include "../../lib/grammar/convert.h"
#include "../../lib/grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct llm_grammar *g = NULL;
    char *gbnf = NULL;
    llm_status s;
    switch (data[0] % 3) {
    case 0:
        if (llm_grammar_parse(&g, text, len, "fuzz.gbnf") == LLM_OK) {
            llm_grammar_accepts(g, text, len);
            llm_grammar_accepts(g, text, len / 3);
        }
        break;
    case 1:
        if (llm_schema_to_gbnf(text, len, "fuzz.json", &gbnf) != LLM_OK)
            break;
        s = llm_grammar_parse(&g, gbnf, strlen(gbnf), "converted");
        if (s && !strstr(llm_error_detail(s), "left-recursive"))
            __builtin_trap();
        break;
    default:
        if (llm_regex_to_gbnf(text, len, "fuzz", &gbnf) != LLM_OK)
            break;
        if (llm_grammar_parse(&g, gbnf, strlen(gbnf), "converted") != LLM_OK)
            __builtin_trap();
        /* the expression's own text is a string it may match */
        llm_grammar_accepts(g, text, len);
        break;
    }
    llm_grammar_free(g);
    llm_free(gbnf);
    return 0;
}
