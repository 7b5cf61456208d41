/* Tests of the batch line reader and writer: every field read as the
 * OpenAI batch schema says, every kind of bad line an error record with its
 * code, message and custom_id, output lines that are valid JSON even for
 * text that is not UTF-8, and the key --resume reads back. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "../../../lib/llm.h"

static struct llm_req_defaults defaults(void)
{
    struct llm_req_defaults d = { .max_tokens = -1 };
    llm_sampler_params_default(&d.sp);
    d.sp.seed = 42;
    return d;
}

static void parse(struct llm_request *r, const char *line)
{
    struct llm_req_defaults d = defaults();
    cr_assert_eq(llm_request_parse(r, line, strlen(line), 7, &d), LLM_OK);
}

Test(request, chat_line_with_every_field)
{
    struct llm_request r;
    parse(&r, "{\"custom_id\":\"c1\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
              "\"body\":{\"model\":\"x\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be "
              "brief.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi \"},"
              "{\"type\":\"text\",\"text\":\"there\"}]}],\"max_completion_tokens\":9,"
              "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,\"min_p\":0.1,\"seed\":3,"
              "\"stop\":[\"a\",\"bc\"],\"n\":2,\"logprobs\":true,\"top_logprobs\":4,"
              "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"priority\":-3}}");
    cr_assert_null(r.err_code, "%s", r.err_msg);
    cr_assert_str_eq(r.custom_id, "c1");
    cr_assert(r.chat);
    cr_assert_eq(r.n_msgs, 2);
    cr_assert_str_eq(r.msgs[0].role, "system");
    cr_assert_str_eq(r.msgs[1].content, "Hi there");
    cr_assert_eq(r.max_tokens, 9);
    cr_assert_float_eq(r.sp.temp, 0.5f, 1e-6);
    cr_assert_float_eq(r.sp.top_p, 0.9f, 1e-6);
    cr_assert_eq(r.sp.top_k, 7);
    cr_assert_float_eq(r.sp.min_p, 0.1f, 1e-6);
    cr_assert_eq(r.sp.seed, 3);
    cr_assert_eq(r.n_stop, 2);
    cr_assert_str_eq(r.stop[1], "bc");
    cr_assert_eq(r.n, 2);
    cr_assert(r.logprobs);
    cr_assert_eq(r.top_logprobs, 4);
    cr_assert_float_eq(r.sp.presence_penalty, 0.5f, 1e-6);
    cr_assert_float_eq(r.sp.frequency_penalty, -0.5f, 1e-6);
    cr_assert_eq(r.priority, -3);
    llm_request_free(&r);
}

Test(request, body_alone_and_defaults)
{
    struct llm_request r;
    parse(&r, "{\"prompt\":\"Once\",\"stop\":\"\\n\",\"logprobs\":3}");
    cr_assert_null(r.err_code, "%s", r.err_msg);
    cr_assert_not(r.chat);
    cr_assert_null(r.custom_id);
    cr_assert_str_eq(r.prompt, "Once");
    cr_assert_eq(r.max_tokens, -1);
    cr_assert_eq(r.n_stop, 1);
    cr_assert(r.logprobs);
    cr_assert_eq(r.top_logprobs, 3);
    /* no seed: one of its own, from the run's and the line's */
    cr_assert_eq(r.sp.seed, 42 + 1000003ull * 7);
    llm_request_free(&r);
    parse(&r, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prompt\":[1,2,3]}");
    cr_assert(r.chat);
    llm_request_free(&r);
    parse(&r, "{\"body\":{\"prompt\":[5,6,7]}}");
    cr_assert_null(r.err_code, "%s", r.err_msg);
    cr_assert_eq(r.n_ids, 3);
    cr_assert_eq(r.ids[2], 7);
    llm_request_free(&r);
}

/* Each bad line: its code, a word of its message, and the custom_id kept. */
Test(request, bad_lines_get_their_error)
{
    static const struct {
        const char *line, *code, *word;
    } cases[] = {
        { "{\"custom_id\":\"k\",", "invalid_json", "not JSON" },
        { "[1,2]", "invalid_request", "object" },
        { "{\"custom_id\":\"k\",\"url\":\"/v1/embeddings\",\"body\":{}}", "unsupported_url", "embeddings" },
        { "{\"custom_id\":\"k\",\"method\":\"GET\",\"body\":{\"prompt\":\"x\"}}", "invalid_request", "POST" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"max_tokens\":\"9\"}}", "invalid_request", "max_tokens" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"max_tokens\":-1}}", "invalid_request", "max_tokens" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"temperature\":true}}", "invalid_request", "temperature" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"top_p\":1.5}}", "invalid_request", "top_p" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"n\":0}}", "invalid_request", "body.n" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"n\":100000}}", "invalid_request", "body.n" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"stream\":true}}", "unsupported", "stream" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"response_format\":{}}}", "invalid_request", "response_format: expected an object with a" },
        { "{\"custom_id\":\"k2\",\"body\":{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"not\":{}}}}}}", "unsupported", "#: 'not' cannot be enforced" },
        { "{\"custom_id\":\"k3\",\"body\":{\"prompt\":\"x\",\"tools\":[]}}", "unsupported", "tools" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"temprature\":1}}", "invalid_request", "unknown" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":[\"a\",\"b\"]}}", "unsupported", "one prompt" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":7}}", "invalid_request", "prompt" },
        { "{\"custom_id\":\"k\",\"url\":\"/v1/chat/completions\",\"body\":{\"prompt\":\"x\"}}", "invalid_request", "messages" },
        { "{\"custom_id\":\"k\",\"body\":{\"messages\":[]}}", "invalid_request", "messages" },
        { "{\"custom_id\":\"k\",\"body\":{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}}", "invalid_request", "robot" },
        { "{\"custom_id\":\"k\",\"body\":{\"messages\":[{\"role\":\"user\"}]}}", "invalid_request", "content" },
        { "{\"custom_id\":\"k\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}}", "unsupported", "text" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"stop\":[\"a\",\"\"]}}", "invalid_request", "stop" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}}", "invalid_request", "stop" },
        { "{\"custom_id\":\"k\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}}", "invalid_request", "logprobs" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"logprobs\":true}}", "invalid_request", "logprobs" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"seed\":1.5}}", "invalid_request", "seed" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"prompt\":\"y\"}}", "invalid_json", "duplicate" },
        { "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\",\"priority\":\"high\"}}", "invalid_request", "priority" },
        { "{\"custom_id\":\"k\",\"body\":[]}", "invalid_request", "body" },
        { "{\"custom_id\":\"k\"}", "invalid_request", "prompt" },
        { "{\"custom_id\":5,\"body\":{\"prompt\":\"x\"}}", "invalid_request", "custom_id" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct llm_request r;
        parse(&r, cases[i].line);
        cr_assert_not_null(r.err_code, "case %zu accepted: %s", i, cases[i].line);
        cr_assert_str_eq(r.err_code, cases[i].code, "case %zu: %s (%s)", i, r.err_code, r.err_msg);
        cr_assert(strstr(r.err_msg, cases[i].word), "case %zu: '%s' lacks '%s'", i, r.err_msg,
                  cases[i].word);
        cr_assert_null(strchr(r.err_msg, '\n'), "case %zu: the message is one line", i);
        if (strstr(cases[i].line, "\"custom_id\":\"k\"") && strcmp(cases[i].code, "invalid_json"))
            cr_assert(r.custom_id && !strcmp(r.custom_id, "k"), "case %zu: custom_id lost", i);
        llm_request_free(&r);
    }
}

static json_t *output_of(const struct llm_request *r, const struct llm_choice_out *ch, int32_t n,
                         char **text)
{
    size_t len;
    FILE *f = open_memstream(text, &len);
    llm_request_write_output(f, r, "m.llm", 1700000000, ch, n, 5, NULL);
    fclose(f);
    cr_assert_eq((*text)[len - 1], '\n');
    cr_assert_null(memchr(*text, '\n', len - 1), "one line");
    json_error_t je;
    json_t *j = json_loadb(*text, len, JSON_ALLOW_NUL, &je);
    cr_assert_not_null(j, "not JSON (%s): %s", je.text, *text);
    return j;
}

Test(request, output_lines_are_json_in_the_batch_shape)
{
    struct llm_request r;
    parse(&r, "{\"custom_id\":\"q\\u00e9\",\"body\":{\"prompt\":\"x\"}}");
    /* a text cut inside a UTF-8 sequence, and a stray byte */
    const char text[] = "caf\xc3\xa9 \xe2\x82 ok \xff\"\n";
    struct llm_choice_out ch[2] = {
        { .text = text, .len = sizeof text - 1, .finish_reason = "length", .n_tokens = 3 },
        { .text = "", .len = 0, .finish_reason = "stop", .n_tokens = 1 },
    };
    char *s;
    json_t *j = output_of(&r, ch, 2, &s);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "line-7");
    cr_assert_str_eq(json_string_value(json_object_get(j, "custom_id")), "q\xc3\xa9");
    json_t *resp = json_object_get(j, "response");
    cr_assert_eq(json_integer_value(json_object_get(resp, "status_code")), 200);
    json_t *body = json_object_get(resp, "body");
    cr_assert_str_eq(json_string_value(json_object_get(body, "object")), "text_completion");
    json_t *c0 = json_array_get(json_object_get(body, "choices"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(c0, "text")),
                     "caf\xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd ok \xef\xbf\xbd\"\n");
    cr_assert_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "length");
    json_t *u = json_object_get(body, "usage");
    cr_assert_eq(json_integer_value(json_object_get(u, "prompt_tokens")), 5);
    cr_assert_eq(json_integer_value(json_object_get(u, "completion_tokens")), 4);
    cr_assert_eq(json_integer_value(json_object_get(u, "total_tokens")), 9);
    cr_assert(json_is_null(json_object_get(j, "error")));
    int64_t line;
    char *cid;
    cr_assert_eq(llm_request_output_key(s, strlen(s), &line, &cid), LLM_OK);
    cr_assert_eq(line, 7);
    cr_assert_str_eq(cid, "q\xc3\xa9");
    llm_free(cid);
    json_decref(j);
    free(s);
    llm_request_free(&r);

    parse(&r, "{\"body\":{\"prompt\":\"x\",\"n\":0}}");
    j = output_of(&r, NULL, 0, &s);
    resp = json_object_get(j, "response");
    cr_assert_eq(json_integer_value(json_object_get(resp, "status_code")), 400);
    cr_assert(json_is_null(json_object_get(resp, "body")));
    json_t *err = json_object_get(j, "error");
    cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "invalid_request");
    cr_assert_eq(json_integer_value(json_object_get(err, "line")), 7);
    cr_assert(json_is_null(json_object_get(j, "custom_id")));
    cr_assert_eq(llm_request_output_key(s, strlen(s), &line, &cid), LLM_OK);
    cr_assert_null(cid);
    json_decref(j);
    free(s);
    llm_request_free(&r);
    cr_assert_eq(llm_request_output_key("{\"id\":\"x-1\"}", 12, &line, &cid), LLM_E_FORMAT);
    cr_assert_eq(llm_request_output_key("{\"id\":\"line-0\"}", 15, &line, &cid), LLM_E_FORMAT);
    cr_assert_eq(llm_request_output_key("nope", 4, &line, &cid), LLM_E_FORMAT);
}

/* A NUL byte: refused between tokens (jansson alone would skip it), and
 * written as \u0000 in a generated text, whose line --resume reads back. */
Test(request, nul_bytes)
{
    static const char line[] = "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\"}\0}";
    struct llm_req_defaults d = { .max_tokens = -1 };
    llm_sampler_params_default(&d.sp);
    struct llm_request r;
    cr_assert_eq(llm_request_parse(&r, line, sizeof line - 1, 7, &d), LLM_OK);
    cr_assert_str_eq(r.err_code, "invalid_json");
    cr_assert(strstr(r.err_msg, "NUL byte (column 39)"), "%s", r.err_msg);
    llm_request_free(&r);

    parse(&r, "{\"custom_id\":\"k\",\"body\":{\"prompt\":\"x\"}}");
    struct llm_choice_out ch = { .text = "a\0b", .len = 3, .finish_reason = "length",
                                 .n_tokens = 3 };
    char *s;
    json_t *j = output_of(&r, &ch, 1, &s);
    cr_assert(strstr(s, "\"a\\u0000b\""), "%s", s);
    json_t *c0 = json_array_get(json_object_get(json_object_get(json_object_get(j, "response"),
                                                                 "body"), "choices"), 0);
    cr_assert_eq(json_string_length(json_object_get(c0, "text")), 3);
    int64_t n;
    char *cid;
    cr_assert_eq(llm_request_output_key(s, strlen(s), &n, &cid), LLM_OK);
    cr_assert_eq(n, 7);
    cr_assert_str_eq(cid, "k");
    llm_free(cid);
    json_decref(j);
    free(s);
    llm_request_free(&r);
}
