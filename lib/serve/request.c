/* request.c: OpenAI batch lines in (jansson) and out. */
#include "request.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../format/meta.h"
#include "../grammar/convert.h"
#include "../grammar/grammar.h"

/* ---- reading ------------------------------------------------------------- */

/* Record the line's error (the first one wins). */
static void fail(struct llm_request *r, const char *code, const char *fmt, ...)
{
    if (r->err_code)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* names from the line (keys, roles, urls) may hold any character: the
     * message stays one printable line */
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    r->err_code = code;
    r->err_msg = llm_strdup(msg);
}

/* Fields of a body that change what is generated but that this engine
 * does not do: refused by name, never ignored. */
static const char *const unsupported[] = {
    "stream", "tools", "tool_choice", "functions", "function_call",
    "logit_bias", "suffix", "best_of", "echo", "guided_json", "guided_regex", "guided_grammar",
    "guided_choice", "prompt_logprobs", "min_tokens", "stop_token_ids", "audio", "modalities",
    "prediction", "parallel_tool_calls", "use_beam_search",
};

/* Fields that say nothing about the text: accepted. */
static const char *const informational[] = {
    "model", "user", "metadata", "store", "service_tier", "stream_options", "n_probs",
};

static int in_list(const char *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i]))
            return 1;
    return 0;
}

/* A number field (an integer one when `integer`): absent or null leaves
 * *v; else it must be in [lo, hi]. Returns 0 on error (recorded). Doubles
 * hold every integer field here exactly (at most 32 bits). */
static int get_num(struct llm_request *r, json_t *body, const char *key, int integer, double lo,
                   double hi, double *v)
{
    json_t *j = json_object_get(body, key);
    if (!j || json_is_null(j))
        return 1;
    if (integer ? !json_is_integer(j) : !json_is_number(j)) {
        fail(r, "invalid_request", "body.%s: expected %s", key, integer ? "an integer" : "a number");
        return 0;
    }
    double x = json_number_value(j);
    if (!(x >= lo && x <= hi)) {
        fail(r, "invalid_request", "body.%s: %.15g is outside [%.15g, %.15g]", key, x, lo, hi);
        return 0;
    }
    *v = x;
    return 1;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = llm_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* A message's content: a string, or an array of {"type": "text", "text"}
 * parts (joined). NULL with the error recorded. */
static char *content_of(struct llm_request *r, json_t *c, size_t i)
{
    if (json_is_string(c))
        return dup_n(json_string_value(c), json_string_length(c));
    if (!json_is_array(c)) {
        fail(r, "invalid_request", "body.messages[%zu].content: expected a string or an array "
             "of text parts", i);
        return NULL;
    }
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "type"), *x = json_object_get(part, "text");
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") || !json_is_string(x)) {
            fail(r, "unsupported", "body.messages[%zu].content[%zu]: only {\"type\": \"text\", "
                 "\"text\": ...} parts are supported", i, k);
            return NULL;
        }
        total += json_string_length(x);
    }
    char *s = llm_malloc(total + 1), *p = s;
    if (!s)
        return NULL;
    json_array_foreach(c, k, part) {
        json_t *x = json_object_get(part, "text");
        memcpy(p, json_string_value(x), json_string_length(x));
        p += json_string_length(x);
    }
    *p = 0;
    return s;
}

static void parse_messages(struct llm_request *r, json_t *m)
{
    if (!json_is_array(m) || !json_array_size(m)) {
        fail(r, "invalid_request", "body.messages: expected a non-empty array");
        return;
    }
    r->msgs = llm_calloc(json_array_size(m), sizeof *r->msgs);
    if (!r->msgs)
        return;
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg) {
        json_t *role = json_object_get(msg, "role"), *c = json_object_get(msg, "content");
        if (!json_is_object(msg) || !json_is_string(role)) {
            fail(r, "invalid_request", "body.messages[%zu]: expected an object with a string "
                 "\"role\"", i);
            return;
        }
        const char *rv = json_string_value(role);
        if (strcmp(rv, "system") && strcmp(rv, "user") && strcmp(rv, "assistant") &&
            strcmp(rv, "developer")) {
            fail(r, "invalid_request", "body.messages[%zu].role: \"%.40s\" is not system, "
                 "developer, user or assistant", i, rv);
            return;
        }
        if (!c) {
            fail(r, "invalid_request", "body.messages[%zu]: no \"content\"", i);
            return;
        }
        char *text = content_of(r, c, i);
        if (!text)
            return;
        /* the templates know "system"; OpenAI's "developer" is the same */
        r->msgs[i].role = !strcmp(rv, "developer") ? "system" : rv;
        r->msgs[i].content = text;
        r->n_msgs = i + 1;
    }
    /* the roles point into the JSON, which is freed: keep static names */
    for (size_t j = 0; j < r->n_msgs; j++)
        r->msgs[j].role = !strcmp(r->msgs[j].role, "system") ? "system"
                          : !strcmp(r->msgs[j].role, "user") ? "user" : "assistant";
}

static void parse_prompt(struct llm_request *r, json_t *p)
{
    if (json_is_string(p)) {
        r->prompt_len = json_string_length(p);
        r->prompt = dup_n(json_string_value(p), r->prompt_len);
        return;
    }
    if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
        size_t n = json_array_size(p), i;
        json_t *v;
        r->ids = llm_malloc(n * sizeof(int32_t));
        if (!r->ids)
            return;
        json_array_foreach(p, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > INT32_MAX) {
                fail(r, "invalid_request", "body.prompt[%zu]: expected a token id", i);
                return;
            }
            r->ids[i] = (int32_t)json_integer_value(v);
        }
        r->n_ids = n;
        return;
    }
    if (json_is_array(p))
        fail(r, "unsupported", "body.prompt: one prompt per line (a string or an array of token "
             "ids), not an array of prompts");
    else
        fail(r, "invalid_request", "body.prompt: expected a string or an array of token ids");
}

static void parse_stop(struct llm_request *r, json_t *s)
{
    if (!s || json_is_null(s))
        return;
    json_t *one[1] = { s };
    size_t n = json_is_array(s) ? json_array_size(s) : 1;
    if (n > LLM_REQ_MAX_STOP) {
        fail(r, "invalid_request", "body.stop: %zu strings, at most %d", n, LLM_REQ_MAX_STOP);
        return;
    }
    r->n_stop = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(s) ? json_array_get(s, i) : one[0];
        if (!json_is_string(v) || !json_string_length(v) ||
            strlen(json_string_value(v)) != json_string_length(v)) {
            fail(r, "invalid_request", "body.stop: expected a non-empty string or an array of them");
            return;
        }
        r->stop[r->n_stop] = llm_strdup(json_string_value(v));
        if (!r->stop[r->n_stop])
            return;
        r->n_stop++;
    }
}

/* response_format: text, json_object, or json_schema {name, schema,
 * strict} (the schema is enforced whatever strict says). */
static void parse_format(struct llm_request *r, json_t *rf)
{
    if (!rf || json_is_null(rf))
        return;
    json_t *type = json_object_get(rf, "type");
    const char *t = json_is_string(type) ? json_string_value(type) : "";
    if (!json_is_object(rf) || !json_is_string(type)) {
        fail(r, "invalid_request", "body.response_format: expected an object with a \"type\"");
    } else if (!strcmp(t, "json_object")) {
        if (!(r->gbnf = llm_strdup(llm_grammar_json)))
            fail(r, "server_error", "out of memory");
    } else if (!strcmp(t, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        json_t *schema = json_object_get(js, "schema");
        if (!json_is_object(js) || (!json_is_object(schema) && !json_is_boolean(schema))) {
            fail(r, "invalid_request", "body.response_format.json_schema: expected an object "
                 "with a \"schema\"");
            return;
        }
        char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        llm_status s = text ? llm_schema_to_gbnf(text, strlen(text), "response_format schema",
                                                 &r->gbnf)
                            : LLM_E_NOMEM;
        free(text); /* jansson's allocation */
        if (s) {
            fail(r, s == LLM_E_UNSUPPORTED ? "unsupported" : "invalid_request", "%s",
                 llm_error_detail(s));
            llm_error_clear();
        }
    } else if (strcmp(t, "text")) {
        fail(r, "invalid_request", "body.response_format.type: \"%.40s\" is not text, "
             "json_object or json_schema", t);
    }
}

static void parse_body(struct llm_request *r, json_t *body, const struct llm_req_defaults *d)
{
    static const char *const known[] = {
        "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p",
        "top_k", "min_p", "seed", "stop", "n", "logprobs", "top_logprobs", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "priority", "custom_id", "response_format",
    };
    const char *key;
    json_t *val;
    json_object_foreach(body, key, val) {
        if (in_list(key, unsupported, sizeof unsupported / sizeof *unsupported)) {
            if (!json_is_null(val) && !json_is_false(val)) {
                fail(r, "unsupported", "body.%s is not supported", key);
                return;
            }
        } else if (!in_list(key, known, sizeof known / sizeof *known) &&
                   !in_list(key, informational, sizeof informational / sizeof *informational)) {
            fail(r, "invalid_request", "body.%.60s: unknown field", key);
            return;
        }
    }
    json_t *msgs = json_object_get(body, "messages"), *prompt = json_object_get(body, "prompt");
    if (r->chat && !msgs) {
        fail(r, "invalid_request", "body: /v1/chat/completions needs \"messages\"");
        return;
    }
    if (!r->chat && !prompt) {
        fail(r, "invalid_request", "body: /v1/completions needs \"prompt\"");
        return;
    }
    if (r->chat)
        parse_messages(r, msgs);
    else
        parse_prompt(r, prompt);
    parse_format(r, json_object_get(body, "response_format"));
    if (r->err_code)
        return;
    /* the sampler's numbers: each left out keeps llm-run's value */
    static const struct {
        const char *key;
        double lo, hi;
        size_t off;
    } reals[] = {
        { "temperature", 0, 100, offsetof(struct llm_sampler_params, temp) },
        { "top_p", 0, 1, offsetof(struct llm_sampler_params, top_p) },
        { "min_p", 0, 1, offsetof(struct llm_sampler_params, min_p) },
        { "presence_penalty", -2, 2, offsetof(struct llm_sampler_params, presence_penalty) },
        { "frequency_penalty", -2, 2, offsetof(struct llm_sampler_params, frequency_penalty) },
        { "repetition_penalty", 1e-3, 100, offsetof(struct llm_sampler_params, repeat_penalty) },
    };
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
        float *f = (float *)((char *)&r->sp + reals[i].off);
        double x = *f;
        if (!get_num(r, body, reals[i].key, 0, reals[i].lo, reals[i].hi, &x))
            return;
        *f = (float)x;
    }
    double v = d->max_tokens;
    if (!get_num(r, body, "max_tokens", 1, 0, INT32_MAX, &v) ||
        !get_num(r, body, "max_completion_tokens", 1, 0, INT32_MAX, &v))
        return;
    r->max_tokens = (int32_t)v;
    v = r->sp.top_k;
    if (!get_num(r, body, "top_k", 1, -1, INT32_MAX, &v))
        return;
    r->sp.top_k = (int32_t)v;
    json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) {
            fail(r, "invalid_request", "body.seed: expected an integer");
            return;
        }
        r->sp.seed = (uint64_t)json_integer_value(seed);
    }
    v = 1;
    if (!get_num(r, body, "n", 1, 1, LLM_REQ_MAX_N, &v))
        return;
    r->n = (int32_t)v;
    json_t *lp = json_object_get(body, "logprobs");
    if (lp && !json_is_null(lp)) {
        if (r->chat && !json_is_boolean(lp)) {
            fail(r, "invalid_request", "body.logprobs: expected true or false (chat)");
            return;
        }
        if (!r->chat && !json_is_integer(lp)) {
            fail(r, "invalid_request", "body.logprobs: expected an integer (completions)");
            return;
        }
        if (r->chat) {
            r->logprobs = json_is_true(lp);
        } else {
            v = 0;
            if (!get_num(r, body, "logprobs", 1, 0, LLM_REQ_MAX_TOP_LOGPROBS, &v))
                return;
            r->logprobs = 1;
            r->top_logprobs = (int32_t)v;
        }
    }
    if (r->chat) {
        v = 0;
        if (!get_num(r, body, "top_logprobs", 1, 0, LLM_REQ_MAX_TOP_LOGPROBS, &v))
            return;
        if (v && !r->logprobs) {
            fail(r, "invalid_request", "body.top_logprobs needs \"logprobs\": true");
            return;
        }
        r->top_logprobs = (int32_t)v;
    }
    v = 0;
    if (!get_num(r, body, "priority", 1, INT32_MIN, INT32_MAX, &v))
        return;
    r->priority = (int64_t)v;
    parse_stop(r, json_object_get(body, "stop"));
}

llm_status llm_request_parse(struct llm_request *r, const char *line, size_t len, int64_t lineno,
                             const struct llm_req_defaults *d)
{
    memset(r, 0, sizeof *r);
    r->line = lineno;
    r->n = 1;
    r->max_tokens = d->max_tokens;
    r->sp = d->sp;
    /* a seed of its own for each line, from the run's */
    r->sp.seed = d->sp.seed + 1000003ull * (uint64_t)lineno;
    if (d->n_stop > LLM_REQ_MAX_STOP)
        return llm_error_set(LLM_E_INVALID, "%zu default stop strings, at most %d", d->n_stop,
                             LLM_REQ_MAX_STOP);
    for (size_t i = 0; i < d->n_stop; i++) {
        if (!(r->stop[i] = llm_strdup(d->stop[i])))
            return LLM_E_NOMEM;
        r->n_stop = i + 1;
    }
    /* jansson skips a raw NUL byte between tokens as if it were a space;
     * JSON has no such byte outside a string, so refuse it here */
    const char *nul = memchr(line, 0, len);
    if (nul) {
        fail(r, "invalid_json", "not JSON: a NUL byte (column %zu)", (size_t)(nul - line) + 1);
        return r->err_msg ? LLM_OK : LLM_E_NOMEM;
    }
    json_error_t je;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (strstr(je.text, "JSON_ALLOW_NUL"))
            fail(r, "invalid_json", "a NUL character (\\u0000) in a string is not supported "
                 "(column %d)", je.column);
        else
            fail(r, "invalid_json", "not JSON: %s (column %d)", je.text, je.column);
        return r->err_msg ? LLM_OK : LLM_E_NOMEM;
    }
    if (!json_is_object(root)) {
        fail(r, "invalid_request", "expected a JSON object");
        json_decref(root);
        return r->err_msg ? LLM_OK : LLM_E_NOMEM;
    }
    json_t *cid = json_object_get(root, "custom_id");
    if (cid && json_is_string(cid))
        r->custom_id = dup_n(json_string_value(cid), json_string_length(cid));
    else if (cid && !json_is_null(cid))
        fail(r, "invalid_request", "custom_id: expected a string");
    json_t *body = json_object_get(root, "body"), *url = json_object_get(root, "url");
    json_t *method = json_object_get(root, "method");
    if (!body) { /* a body alone */
        body = root;
        r->chat = json_object_get(root, "messages") != NULL;
        if (!r->chat && !json_object_get(root, "prompt"))
            fail(r, "invalid_request", "no \"body\", \"messages\" or \"prompt\"");
    } else {
        if (!json_is_object(body))
            fail(r, "invalid_request", "body: expected an object");
        if (method && (!json_is_string(method) || strcmp(json_string_value(method), "POST")))
            fail(r, "invalid_request", "method: only \"POST\" is supported");
        if (url && !json_is_string(url)) {
            fail(r, "invalid_request", "url: expected a string");
        } else if (url) {
            const char *u = json_string_value(url);
            if (!strcmp(u, "/v1/chat/completions"))
                r->chat = 1;
            else if (!strcmp(u, "/v1/completions"))
                r->chat = 0;
            else
                fail(r, "unsupported_url", "url \"%.60s\": supported are /v1/chat/completions "
                     "and /v1/completions", u);
        } else if (json_is_object(body)) {
            r->chat = json_object_get(body, "messages") != NULL;
        }
    }
    if (!r->err_code && json_is_object(body))
        parse_body(r, body, d);
    json_decref(root);
    if (r->err_code && !r->err_msg)
        return LLM_E_NOMEM;
    return LLM_OK;
}

llm_status llm_request_tokenize(struct llm_request *r, struct llm_model *m, const char *tmpl,
                                int32_t n_ctx)
{
    if (r->err_code)
        return LLM_OK;
    struct llm_tokenizer *tok = llm_model_tokenizer(m);
    int32_t n_vocab = llm_model_config(m)->n_vocab;
    if (!r->ids) {
        char *text = r->prompt;
        size_t len = r->prompt_len;
        int flags = LLM_TOK_ADD_BOS;
        if (r->chat) {
            llm_status s = llm_chat_render(llm_model_file(m), tmpl, r->msgs, r->n_msgs, 1, &text);
            if (s == LLM_E_NOMEM)
                return s;
            if (s) {
                fail(r, "invalid_request", "messages: %s", llm_error_detail(s));
                llm_error_clear();
                return r->err_msg ? LLM_OK : LLM_E_NOMEM;
            }
            len = strlen(text);
            flags |= LLM_TOK_PARSE_SPECIAL;
        }
        llm_status s = llm_tokenize(tok, text ? text : "", len, flags, &r->ids, &r->n_ids);
        if (r->chat)
            llm_free(text);
        if (s == LLM_E_NOMEM)
            return s;
        if (s) {
            fail(r, "invalid_request", "prompt: %s", llm_error_detail(s));
            llm_error_clear();
        }
    } else {
        for (size_t i = 0; i < r->n_ids; i++)
            if (r->ids[i] >= n_vocab) {
                fail(r, "invalid_request", "body.prompt[%zu]: token %d is outside the "
                     "vocabulary of %d", i, r->ids[i], n_vocab);
                break;
            }
    }
    if (!r->err_code && r->n_ids == 0)
        fail(r, "invalid_request", "the prompt is empty (no tokens to start from)");
    if (!r->err_code && r->n_ids > (size_t)n_ctx)
        fail(r, "context_length_exceeded", "the prompt has %zu tokens, more than the context "
             "of %d", r->n_ids, n_ctx);
    return r->err_code && !r->err_msg ? LLM_E_NOMEM : LLM_OK;
}

void llm_request_free(struct llm_request *r)
{
    llm_free(r->custom_id);
    llm_free(r->err_msg);
    llm_free(r->prompt);
    for (size_t i = 0; i < r->n_msgs; i++)
        llm_free((void *)r->msgs[i].content);
    llm_free(r->msgs);
    llm_free(r->ids);
    llm_free(r->gbnf);
    llm_free(r->state);
    for (size_t i = 0; i < r->n_stop; i++)
        llm_free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* ---- writing ------------------------------------------------------------- */

static void piece(FILE *f, const struct llm_tokenizer *tok, int32_t id, int bytes_too)
{
    const char *b = "";
    size_t n = 0;
    char buf[8];
    if (llm_token_piece(tok, id, 1, &b, &n, buf))
        llm_error_clear(), b = "", n = 0;
    fputs("\"token\":", f);
    llm_json_string(f, b, n);
    if (bytes_too) {
        fputs(",\"bytes\":[", f);
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%s%u", i ? "," : "", (unsigned char)b[i]);
        fputc(']', f);
    }
}

/* A log-probability as JSON (-inf, which JSON lacks, as -9999). */
static void lp_num(FILE *f, float lp)
{
    fprintf(f, "%.6g", isfinite(lp) ? (double)lp : -9999.0);
}

static void chat_logprobs(FILE *f, const struct llm_choice_out *c, const struct llm_tokenizer *tok)
{
    fputs("{\"content\":[", f);
    for (int32_t t = 0; t < c->n_tokens; t++) {
        fputs(t ? ",{" : "{", f);
        piece(f, tok, c->ids[t], 1);
        fputs(",\"logprob\":", f);
        lp_num(f, c->lp[t]);
        fputs(",\"top_logprobs\":[", f);
        for (int32_t j = 0; j < c->k; j++) {
            fputs(j ? ",{" : "{", f);
            piece(f, tok, c->top_ids[(size_t)t * c->k + j], 1);
            fputs(",\"logprob\":", f);
            lp_num(f, c->top_lp[(size_t)t * c->k + j]);
            fputc('}', f);
        }
        fputs("]}", f);
    }
    fputs("]}", f);
}

static void completion_logprobs(FILE *f, const struct llm_choice_out *c,
                                const struct llm_tokenizer *tok)
{
    fputs("{\"tokens\":[", f);
    for (int32_t t = 0; t < c->n_tokens; t++) {
        const char *b = "";
        size_t n = 0;
        char buf[8];
        if (llm_token_piece(tok, c->ids[t], 1, &b, &n, buf))
            llm_error_clear(), n = 0;
        if (t)
            fputc(',', f);
        llm_json_string(f, b, n);
    }
    fputs("],\"token_logprobs\":[", f);
    for (int32_t t = 0; t < c->n_tokens; t++) {
        if (t)
            fputc(',', f);
        lp_num(f, c->lp[t]);
    }
    fputs("],\"top_logprobs\":[", f);
    for (int32_t t = 0; t < c->n_tokens; t++) {
        fputs(t ? ",{" : "{", f);
        for (int32_t j = 0; j < c->k; j++) {
            const char *b = "";
            size_t n = 0;
            char buf[8];
            if (llm_token_piece(tok, c->top_ids[(size_t)t * c->k + j], 1, &b, &n, buf))
                llm_error_clear(), n = 0;
            if (j)
                fputc(',', f);
            llm_json_string(f, b, n);
            fputc(':', f);
            lp_num(f, c->top_lp[(size_t)t * c->k + j]);
        }
        fputc('}', f);
    }
    fputs("]}", f);
}

void llm_request_write_output(FILE *f, const struct llm_request *r, const char *model,
                              int64_t created, const struct llm_choice_out *choices,
                              int32_t n_choices, int32_t prompt_tokens,
                              const struct llm_tokenizer *tok)
{
    fprintf(f, "{\"id\":\"line-%lld\",\"custom_id\":", (long long)r->line);
    if (r->custom_id)
        llm_json_string(f, r->custom_id, strlen(r->custom_id));
    else
        fputs("null", f);
    if (r->err_code) {
        fprintf(f, ",\"response\":{\"status_code\":400,\"request_id\":\"line-%lld\",\"body\":null},"
                "\"error\":{\"code\":\"%s\",\"message\":", (long long)r->line, r->err_code);
        const char *m = r->err_msg ? r->err_msg : "";
        llm_json_string(f, m, strlen(m));
        fputs(",\"line\":", f);
        fprintf(f, "%lld}}\n", (long long)r->line);
        return;
    }
    fprintf(f, ",\"response\":{\"status_code\":200,\"request_id\":\"line-%lld\",\"body\":{"
            "\"id\":\"%s-line-%lld\",\"object\":\"%s\",\"created\":%lld,\"model\":",
            (long long)r->line, r->chat ? "chatcmpl" : "cmpl", (long long)r->line,
            r->chat ? "chat.completion" : "text_completion", (long long)created);
    llm_json_string(f, model, strlen(model));
    fputs(",\"choices\":[", f);
    int32_t gen = 0;
    for (int32_t i = 0; i < n_choices; i++) {
        const struct llm_choice_out *c = &choices[i];
        gen += c->n_tokens;
        fprintf(f, "%s{\"index\":%d,", i ? "," : "", i);
        if (r->chat) {
            fputs("\"message\":{\"role\":\"assistant\",\"content\":", f);
            llm_json_string(f, c->text, c->len);
            fputs("}", f);
        } else {
            fputs("\"text\":", f);
            llm_json_string(f, c->text, c->len);
        }
        fputs(",\"logprobs\":", f);
        if (!r->logprobs)
            fputs("null", f);
        else if (r->chat)
            chat_logprobs(f, c, tok);
        else
            completion_logprobs(f, c, tok);
        fprintf(f, ",\"finish_reason\":\"%s\"}", c->finish_reason);
    }
    fprintf(f, "],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}},"
            "\"error\":null}\n", prompt_tokens, gen, prompt_tokens + gen);
}

llm_status llm_request_output_key(const char *line, size_t len, int64_t *lineno,
                                  char **custom_id)
{
    *custom_id = NULL;
    /* a generated text may hold a NUL byte, written as \u0000 */
    json_t *root = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
    json_t *id = root ? json_object_get(root, "id") : NULL;
    json_t *cid = root ? json_object_get(root, "custom_id") : NULL;
    long long n = 0;
    int end = 0;
    if (!json_is_string(id) || sscanf(json_string_value(id), "line-%lld%n", &n, &end) != 1 ||
        json_string_value(id)[end] || n < 1 || (cid && !json_is_string(cid) && !json_is_null(cid))) {
        json_decref(root);
        return LLM_E_FORMAT;
    }
    *lineno = n;
    if (json_is_string(cid) && !(*custom_id = dup_n(json_string_value(cid),
                                                     json_string_length(cid)))) {
        json_decref(root);
        return LLM_E_NOMEM;
    }
    json_decref(root);
    return LLM_OK;
}
