/* test_convert.c: regular expressions and JSON Schemas turned into
 * grammars: what they accept and what they refuse, by name. */
#include <stdio.h>
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/grammar/convert.h"
#include "../../../lib/grammar/grammar.h"
#include "../helpers.h"

static struct llm_grammar *compile(char *gbnf)
{
    struct llm_grammar *g = NULL;
    llm_status s = llm_grammar_parse(&g, gbnf, strlen(gbnf), "converted");
    cr_assert_eq(s, LLM_OK, "%s\n%s", llm_error_detail(s), gbnf);
    llm_free(gbnf);
    return g;
}

static struct llm_grammar *regex(const char *re)
{
    char *gbnf;
    llm_status s = llm_regex_to_gbnf(re, strlen(re), "re", &gbnf);
    cr_assert_eq(s, LLM_OK, "%s: %s", re, llm_error_detail(s));
    return compile(gbnf);
}

static struct llm_grammar *schema(const char *json)
{
    char *gbnf;
    llm_status s = llm_schema_to_gbnf(json, strlen(json), "s.json", &gbnf);
    cr_assert_eq(s, LLM_OK, "%s: %s", json, llm_error_detail(s));
    return compile(gbnf);
}

static void check(const struct llm_grammar *g, const char *text, int want)
{
    cr_assert_eq(llm_grammar_accepts(g, text, strlen(text)), want, "'%s' should be %s", text,
                 want ? "accepted" : "refused");
}

Test(convert, regex_language)
{
    struct llm_grammar *g = regex("^[a-z0-9._]+@[a-z]+\\.(com|org)$");
    check(g, "ada.l_1@example.com", 1);
    check(g, "ada@example.net", 0);
    check(g, "Ada@example.com", 0);
    llm_grammar_free(g);
    g = regex("\\d{3}-\\d{2,}|colou?r|(?:x|y)*?z");
    check(g, "555-12", 1);
    check(g, "555-1234567", 1);
    check(g, "555-1", 0);
    check(g, "color", 1);
    check(g, "colour", 1);
    check(g, "xyxz", 1);
    check(g, "z", 1);
    check(g, "xy", 0);
    llm_grammar_free(g);
    g = regex("[^\\s,]+(,\\s?[^\\s,]+)*\\.\\w\\S");
    check(g, "a, b,c.x!", 1);
    check(g, "a,, b.x!", 0);
    check(g, "a b.xx", 0);
    llm_grammar_free(g);
    g = regex(".\\x41\\u00e9\\n\\t[\\]\\-]");
    check(g, "\xe4\xb8\xad" "A\xc3\xa9\n\t]", 1);
    check(g, "\nA\xc3\xa9\n\t-", 0); /* '.' is not a newline */
    llm_grammar_free(g);
}

static void regex_refused(const char *re, const char *detail)
{
    char *gbnf = NULL;
    llm_status s = llm_regex_to_gbnf(re, strlen(re), "re", &gbnf);
    cr_assert_eq(s, LLM_E_UNSUPPORTED, "%s: converted", re);
    cr_assert_null(gbnf);
    cr_assert_str_eq(llm_error_detail(s), detail);
}

Test(convert, regex_refusals)
{
    regex_refused("(a)\\1", "re: at offset 3 of the expression: back-references cannot be enforced");
    regex_refused("a(?=b)", "re: at offset 1 of the expression: lookaround and named groups cannot be enforced");
    regex_refused("\\bx", "re: at offset 0 of the expression: word boundaries (\\b, \\B) cannot be enforced");
    regex_refused("a**", "re: at offset 2 of the expression: a repetition of a repetition (use a group)");
    regex_refused("(ab", "re: at offset 0 of the expression: expected ')'");
    regex_refused("a{3,2}", "re: at offset 1 of the expression: {m,n} with n below m");
    regex_refused("[\\D]", "re: at offset 0 of the expression: \\D, \\W and \\S inside a class cannot be enforced");
    /* UTF-8 that decodes past U+10FFFF, overlong or a surrogate (a fuzzer's
     * find: it once became an escape the GBNF parser refused) */
    regex_refused("t\xf4\x91\x8d\x82", "re: at offset 1 of the expression: invalid UTF-8");
    regex_refused("\xe0\x80\xaf", "re: at offset 0 of the expression: invalid UTF-8");
    regex_refused("\xed\xa0\x80", "re: at offset 0 of the expression: invalid UTF-8");
}

/* Integer bounds become digit patterns: checked against the arithmetic. */
Test(convert, schema_integer_ranges)
{
    static const long long b[][2] = { { 0, 0 }, { 7, 7 }, { -5, 5 }, { 13, 987 }, { -1200, -3 },
                                      { 100, 1099 }, { 0, 999 }, { 1, 10 }, { 99, 101 } };
    for (size_t k = 0; k < sizeof b / sizeof *b; k++) {
        char js[200], num[32];
        snprintf(js, sizeof js, "{\"type\": \"integer\", \"minimum\": %lld, \"maximum\": %lld}",
                 b[k][0], b[k][1]);
        struct llm_grammar *g = schema(js);
        for (long long i = -1300; i <= 1300; i++) {
            snprintf(num, sizeof num, "%lld", i);
            check(g, num, i >= b[k][0] && i <= b[k][1]);
        }
        check(g, "-0", 0); /* JSON allows it, the digit patterns do not */
        check(g, "007", 0);
        llm_grammar_free(g);
    }
    struct llm_grammar *g = schema("{\"type\": \"integer\", \"exclusiveMinimum\": 41}");
    check(g, "41", 0);
    check(g, "42", 1);
    check(g, "123456789012", 1);
    check(g, "-50", 0);
    llm_grammar_free(g);
    g = schema("{\"type\": \"integer\", \"exclusiveMaximum\": -2.5}");
    check(g, "-3", 1);
    check(g, "-2", 0);
    check(g, "-99999", 1);
    llm_grammar_free(g);
}

static const char book[] =
    "{\"type\": \"object\", \"properties\": {"
    "  \"title\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 20},"
    "  \"author\": {\"$ref\": \"#/$defs/person\"},"
    "  \"year\": {\"type\": \"integer\", \"minimum\": 1450, \"maximum\": 2026},"
    "  \"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"fiction\", \"poetry\", 3]},"
    "            \"minItems\": 1, \"maxItems\": 2},"
    "  \"isbn\": {\"type\": \"string\", \"pattern\": \"^97[89]-\\\\d{4}$\"},"
    "  \"note\": {\"type\": \"string\", \"pattern\": \"ok\"},"
    "  \"rating\": {\"type\": [\"number\", \"null\"]},"
    "  \"when\": {\"type\": \"string\", \"format\": \"date-time\"},"
    "  \"pair\": {\"type\": \"array\", \"prefixItems\": [{\"type\": \"boolean\"}, {\"const\": \"x\"}]},"
    "  \"any\": {\"anyOf\": [{\"type\": \"null\"}, {\"$ref\": \"#/$defs/person\"}]}"
    "}, \"required\": [\"title\", \"year\"], \"additionalProperties\": false,"
    "\"$defs\": {\"person\": {\"type\": \"object\", \"properties\": {"
    "  \"name\": {\"type\": \"string\"}, \"friend\": {\"$ref\": \"#/$defs/person\"}},"
    "  \"required\": [\"name\"], \"additionalProperties\": {\"type\": \"integer\"}}}}";

Test(convert, schema_objects_arrays_strings)
{
    struct llm_grammar *g = schema(book);
    check(g, "{\"title\": \"Dune\", \"year\": 1965}", 1);
    check(g, "{\"year\": 1965, \"title\": \"Dune\"}", 0);            /* the schema's order */
    check(g, "{\"title\": \"Dune\"}", 0);                            /* required */
    check(g, "{\"title\": \"\", \"year\": 1965}", 0);                /* minLength */
    check(g, "{\"title\": \"Dune\", \"year\": 2027}", 0);            /* maximum */
    check(g, "{\"title\": \"Dune\", \"year\": 1965, \"x\": 1}", 0);  /* no others */
    check(g, "{\"title\": \"D\", \"author\": {\"name\": \"F\", \"friend\": {\"name\": \"G\", \"age\": 3}},"
             " \"year\": 1965, \"tags\": [\"poetry\", 3], \"isbn\": \"978-1234\", \"note\": \"it is ok!\","
             " \"rating\": null, \"when\": \"2024-02-29T12:00:00Z\", \"pair\": [true, \"x\"],"
             " \"any\": {\"name\": \"H\"}}", 1);
    check(g, "{\"title\": \"D\", \"year\": 1965, \"tags\": []}", 0);                       /* minItems */
    check(g, "{\"title\": \"D\", \"year\": 1965, \"tags\": [3, 3, 3]}", 0);                /* maxItems */
    check(g, "{\"title\": \"D\", \"year\": 1965, \"tags\": [\"drama\"]}", 0);              /* enum */
    check(g, "{\"title\": \"D\", \"year\": 1965, \"isbn\": \"977-1234\"}", 0);             /* pattern */
    check(g, "{\"title\": \"D\", \"year\": 1965, \"note\": \"not good\"}", 0);             /* searched */
    check(g, "{\"title\": \"D\", \"year\": 1965, \"author\": {\"name\": \"F\", \"age\": \"3\"}}", 0);
    check(g, "{\"title\": \"D\", \"year\": 1965, \"pair\": [true]}", 0);                   /* all prefix */
    check(g, "{\"title\": \"D\", \"year\": 1965, \"when\": \"2024-13-01T00:00:00Z\"}", 0);
    llm_grammar_free(g);
}

static void schema_refused(const char *json, llm_status want, const char *detail)
{
    char *gbnf = NULL;
    llm_status s = llm_schema_to_gbnf(json, strlen(json), "s.json", &gbnf);
    cr_assert_eq(s, want, "%s: %d (%s)", json, s, llm_error_detail(s));
    cr_assert_null(gbnf);
    cr_assert_str_eq(llm_error_detail(s), detail);
}

Test(convert, schema_refusals_by_name)
{
    schema_refused("{\"not\": {\"type\": \"null\"}}", LLM_E_UNSUPPORTED, "s.json: #: 'not' cannot be enforced");
    schema_refused("{\"properties\": {\"a\": {\"allOf\": []}}}", LLM_E_UNSUPPORTED,
                   "s.json: #/properties/a: 'allOf' cannot be enforced");
    schema_refused("{\"type\": \"string\", \"format\": \"email\"}", LLM_E_UNSUPPORTED,
                   "s.json: #: format 'email' cannot be enforced (date, time, date-time and uuid can)");
    schema_refused("{\"type\": \"number\", \"minimum\": 0.5}", LLM_E_UNSUPPORTED,
                   "s.json: #: bounds on a number (not an integer) cannot be enforced");
    schema_refused("{\"type\": \"array\", \"items\": {\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}}",
                   LLM_E_UNSUPPORTED, "s.json: #/items/pattern: at offset 3 of the expression: "
                   "back-references cannot be enforced");
    schema_refused("{\"$ref\": \"https://example.com/s.json\"}", LLM_E_UNSUPPORTED,
                   "s.json: #: '$ref' other than '#', '#/$defs/NAME' or '#/definitions/NAME' cannot be followed");
    schema_refused("{\"type\": \"object\", \"required\": [\"a\"]}", LLM_E_UNSUPPORTED,
                   "s.json: #: required property 'a' is not in properties");
    schema_refused("{\"type\": \"strin\"}", LLM_E_FORMAT, "s.json: #: unknown type 'strin'");
    schema_refused("{\"type\": ", LLM_E_FORMAT, "s.json:1:9: not JSON: unexpected token near end of file");
}
