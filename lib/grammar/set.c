/* set.c: the grammars of a batch run, each compiled once however many
 * requests use it (most runs send one schema with every request). */
#include <string.h>

#include "../common/alloc.h"
#include "grammar.h"

struct entry {
    char *text;
    struct llm_grammar *g;
    struct llm_gmask *m;
};

struct llm_grammar_set {
    const struct llm_tokenizer *tok;
    struct entry *e;
    size_t n, cap;
};

llm_status llm_grammar_set_new(struct llm_grammar_set **out, const struct llm_tokenizer *tok)
{
    *out = llm_calloc(1, sizeof **out);
    if (!*out)
        return LLM_E_NOMEM;
    (*out)->tok = tok;
    return LLM_OK;
}

void llm_grammar_set_free(struct llm_grammar_set *gs)
{
    if (!gs)
        return;
    for (size_t i = 0; i < gs->n; i++) {
        llm_gmask_free(gs->e[i].m);
        llm_grammar_free(gs->e[i].g);
        llm_free(gs->e[i].text);
    }
    llm_free(gs->e);
    llm_free(gs);
}

llm_status llm_grammar_set_get(struct llm_grammar_set *gs, const char *text, const char *name,
                               struct llm_gmask **out)
{
    *out = NULL;
    for (size_t i = 0; i < gs->n; i++)
        if (!strcmp(gs->e[i].text, text)) {
            *out = gs->e[i].m;
            return LLM_OK;
        }
    void *p = gs->e;
    LLM_TRY(llm_grow(&p, &gs->cap, gs->n + 1, sizeof *gs->e));
    gs->e = p;
    struct entry e = { 0 };
    llm_status s = (e.text = llm_strdup(text)) ? LLM_OK : LLM_E_NOMEM;
    if (!s)
        s = llm_grammar_parse(&e.g, text, strlen(text), name);
    if (!s)
        s = llm_gmask_new(&e.m, e.g, gs->tok);
    if (s) {
        llm_grammar_free(e.g);
        llm_free(e.text);
        return s;
    }
    gs->e[gs->n++] = e;
    *out = e.m;
    return LLM_OK;
}
