/* request.h: one line of an OpenAI batch file: parsed, checked, turned
 * into prompt tokens; and the output line that answers it.
 *
 * Input (serving.md 6.1): {"custom_id", "method": "POST", "url":
 * "/v1/chat/completions" | "/v1/completions", "body": {...}}, or a body
 * alone ({"prompt": ...} or {"messages": [...]}). Output: {"id",
 * "custom_id", "response": {"status_code", "request_id", "body"}, "error"}
 * with a chat.completion or text_completion body, or an error record. A
 * line that cannot be served keeps what could be read of it (its custom_id)
 * and gets an error code and a one-line message instead.
 */
#ifndef LLM_SERVE_REQUEST_H
#define LLM_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"
#include "../model/model.h"
#include "../sample/sample.h"
#include "../tokenizer/tokenizer.h"

#define LLM_REQ_MAX_STOP 16
#define LLM_REQ_MAX_N 128
#define LLM_REQ_MAX_TOP_LOGPROBS 20

/* What a field left out of a request takes: llm-run's options. */
struct llm_req_defaults {
    int32_t max_tokens;            /* -1: until end of text or the context is full */
    struct llm_sampler_params sp;  /* sp.seed: the run's seed; a request without one draws
                                      with a seed made from it and its line number */
    const char *const *stop;
    size_t n_stop;
    const char *chat_template;     /* NULL: the model's */
};

struct llm_request {
    int64_t line;                  /* 1-based line of the input */
    char *custom_id;               /* NULL when the line has none (or is not JSON) */
    int chat;                      /* /v1/chat/completions; else /v1/completions */
    /* an error found while reading the line: the code ("invalid_json",
     * "invalid_request", "unsupported", "context_length_exceeded", ...) and
     * message; NULL code: none */
    const char *err_code;
    char *err_msg;
    /* the prompt: text (completions), messages (chat) or token ids */
    char *prompt;
    size_t prompt_len;
    struct llm_chat_msg *msgs;     /* (n_msgs), strings owned */
    size_t n_msgs;
    int32_t *ids;                  /* (n_ids) after llm_request_tokenize */
    size_t n_ids;
    /* generation */
    int32_t max_tokens;
    struct llm_sampler_params sp;  /* choice i draws with sp.seed + i */
    char *stop[LLM_REQ_MAX_STOP];
    size_t n_stop;
    int32_t n;                     /* choices */
    int logprobs;                  /* report log-probabilities */
    int32_t top_logprobs;          /* alternatives per token (with logprobs) */
    int64_t priority;              /* lower runs first */
    char *gbnf;                    /* response_format as a grammar, or NULL (any text) */
    struct llm_gmask *gmask;       /* it compiled (llm_batch_prepare), borrowed from the run */
    /* the prompt's state, computed by another process (serve/handoff.h): a
     * KV state file's bytes, checked against ids; NULL: computed here */
    void *state;
    size_t state_len;
};

/* Read one line (len bytes, without its newline). Always fills r: on a bad
 * line r->err_code and r->err_msg say why (and r->custom_id is kept when
 * it could be read). LLM_E_NOMEM, or LLM_E_INVALID for defaults with more
 * than LLM_REQ_MAX_STOP stop strings. */
llm_status llm_request_parse(struct llm_request *r, const char *line, size_t len, int64_t lineno,
                             const struct llm_req_defaults *d);

/* The prompt as tokens (r->ids), as llm-run makes them: a chat rendered with
 * the template and its special tokens parsed, a completion's text with BOS,
 * token ids as they are. Errors of the request (a template that refuses
 * the messages, an empty or too long prompt) set r->err_code and return
 * LLM_OK; LLM_E_NOMEM only. */
llm_status llm_request_tokenize(struct llm_request *r, struct llm_model *m, const char *tmpl,
                                int32_t n_ctx);

void llm_request_free(struct llm_request *r);

/* What one choice produced. */
struct llm_choice_out {
    const char *text;
    size_t len;
    const char *finish_reason;     /* "stop" or "length" */
    int32_t n_tokens;
    /* with logprobs: per token its id, log-probability and top alternatives */
    const int32_t *ids;            /* (n_tokens) */
    const float *lp;               /* (n_tokens) */
    const int32_t *top_ids;        /* (n_tokens, k) */
    const float *top_lp;           /* (n_tokens, k) */
    int32_t k;
};

/* Write r's output line (with its newline) to f: the response with the
 * choices (n_choices), or r's error record when r->err_code is set. Text
 * that is not valid UTF-8 is written with U+FFFD for the bad bytes.
 * `model` names the model in the body; `created` is a Unix time. */
void llm_request_write_output(FILE *f, const struct llm_request *r, const char *model,
                              int64_t created, const struct llm_choice_out *choices,
                              int32_t n_choices, int32_t prompt_tokens,
                              const struct llm_tokenizer *tok);

/* The input line an output line answers, from its "id" ("line-N"), and its
 * custom_id (malloc'd, NULL when null): for --resume. LLM_E_FORMAT when the
 * line is not one of ours. */
llm_status llm_request_output_key(const char *line, size_t len, int64_t *lineno,
                                  char **custom_id);

#endif
