/* grammar.h: constrained decoding. A grammar in llama.cpp's GBNF (JSON
 * Schemas, regular expressions and "any JSON value" are turned into GBNF
 * first) compiles to a pushdown automaton over code points; bound to a
 * model's vocabulary it says, at each step, which tokens may come next.
 *
 * Three objects:
 *   - struct llm_grammar: the rules, immutable (llm_grammar_parse);
 *   - struct llm_gmask: a grammar bound to a tokenizer, shared by every
 *     sequence that uses it. It owns the stack nodes (interned, so that a
 *     stack is one pointer and two equal stacks are the same pointer), the
 *     per-position token classes and the cache of whole masks;
 *   - struct llm_gmatch: one sequence's place in the grammar: a set of
 *     stacks, whether the grammar may end here, and the bytes of a code
 *     point that a token left unfinished.
 *
 * How a mask is made, after XGrammar (arXiv 2411.15100): a stack's top is
 * a character set at some position P of some rule. Which tokens the stack
 * accepts depends on P alone as long as the token stays inside P's rule
 * (and the rules it calls); only a token that runs past the end of P's
 * rule depends on the stacks below. So for each P, once, the vocabulary
 * (sorted, so that tokens sharing a prefix share the work) is walked from
 * P with an unknown rest of stack, and its tokens are split into accepted,
 * rejected and uncertain; at run time a mask is the union of the accepted
 * sets of its stacks' tops, plus the uncertain tokens checked one by one
 * against the real stacks. Whole masks are cached by state as well.
 * Neither cache changes a result: only how fast it comes.
 *
 * End-of-generation tokens are allowed exactly where the grammar can end;
 * tokens with no text (control tokens) never are. A token may end in the
 * middle of a UTF-8 sequence (byte-level vocabularies split characters):
 * it is allowed when some completion of the character fits the grammar.
 * None of these objects is safe to share between threads.
 */
#ifndef LLM_GRAMMAR_GRAMMAR_H
#define LLM_GRAMMAR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

struct llm_tokenizer;
struct llm_grammar;
struct llm_gmask;
struct llm_gmatch;

/* Parse GBNF text (len bytes) whose start rule is `root`. `name` names the
 * source in errors: LLM_E_FORMAT with "NAME:LINE:COL: expected ...", or an
 * undefined rule, a missing root, a left-recursive rule. */
llm_status llm_grammar_parse(struct llm_grammar **out, const char *src, size_t len,
                             const char *name);
void llm_grammar_free(struct llm_grammar *g);
/* Does the grammar accept the whole of `s` (len bytes)? (For tests and
 * checks; a generation uses the masks below.) */
int llm_grammar_accepts(const struct llm_grammar *g, const char *s, size_t len);

/* The GBNF of any JSON value (what --json-object and response_format
 * json_object use). */
extern const char llm_grammar_json[];

/* Bind a grammar to a vocabulary; both must outlive the result. */
llm_status llm_gmask_new(struct llm_gmask **out, const struct llm_grammar *g,
                         const struct llm_tokenizer *tok);
void llm_gmask_free(struct llm_gmask *m);

/* Time spent making masks, for reports. */
struct llm_gmask_stats {
    int64_t n_masks;        /* masks asked for */
    int64_t n_cached;       /* of them, found whole in the cache */
    int64_t n_positions;    /* positions whose token classes were computed */
    double t_median_us, t_p99_us, t_max_us, t_total_s;
};
void llm_gmask_stats(const struct llm_gmask *m, struct llm_gmask_stats *st);

/* A sequence at the start of the grammar. */
llm_status llm_gmatch_new(struct llm_gmatch **out, struct llm_gmask *m);
/* A copy of another sequence's place (for forks). */
llm_status llm_gmatch_copy(struct llm_gmatch **out, const struct llm_gmatch *src);
void llm_gmatch_free(struct llm_gmatch *s);

/* The tokens allowed next: bits (n_vocab bits, token t is bit t%64 of word
 * t/64) stays valid until the next call on any sequence of the same mask;
 * *n_allowed counts them and *only is the token when there is exactly one
 * (jump-forward), else -1. */
llm_status llm_gmatch_allowed(struct llm_gmatch *s, const uint64_t **bits, int32_t *n_allowed,
                              int32_t *only);
/* Set the logits (n_vocab) of tokens not allowed to -INFINITY. */
llm_status llm_gmatch_apply(struct llm_gmatch *s, float *logits, int32_t *n_allowed,
                            int32_t *only);
/* Advance past token id. LLM_E_INVALID (with a detail) when the grammar
 * does not allow it; the state is then unchanged. */
llm_status llm_gmatch_accept(struct llm_gmatch *s, int32_t id);
/* May the grammar end here? And must it (nothing else can follow)? */
int llm_gmatch_can_end(const struct llm_gmatch *s);
int llm_gmatch_must_end(const struct llm_gmatch *s);

/* Where a grammar comes from (the four options of llm-run and llm-bench). */
enum llm_grammar_kind {
    LLM_GRAMMAR_GBNF,       /* arg: a GBNF file ('-': stdin) */
    LLM_GRAMMAR_SCHEMA,     /* arg: a JSON Schema file */
    LLM_GRAMMAR_REGEX,      /* arg: a regular expression, the whole text to match */
    LLM_GRAMMAR_JSON,       /* any JSON value (arg unused) */
};
/* Read, convert and parse it; errors name the file (or the option). */
llm_status llm_grammar_load(struct llm_grammar **out, enum llm_grammar_kind kind,
                            const char *arg);

/* The grammars of a batch run: each distinct text compiled and bound to
 * the vocabulary once, and kept until the set is freed. */
struct llm_grammar_set;
llm_status llm_grammar_set_new(struct llm_grammar_set **out, const struct llm_tokenizer *tok);
void llm_grammar_set_free(struct llm_grammar_set *gs);
/* The compiled grammar of GBNF `text` (`name` heads parse errors). */
llm_status llm_grammar_set_get(struct llm_grammar_set *gs, const char *text, const char *name,
                               struct llm_gmask **out);

#endif
