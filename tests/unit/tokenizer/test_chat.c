/* test_chat.c: chat templates against the strings the published templates
 * render (formats.md §5.2), and family detection from template text. */
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/format/file.h"
#include "../../../lib/format/import.h"
#include "../../../lib/tokenizer/tokenizer.h"
#include "../helpers.h"

/* The conversation of formats.md §5.2. */
static const struct llm_chat_msg conv[] = {
    { "system", "You are terse." },
    { "user", "Hello" },
    { "assistant", "Hi!" },
    { "user", "What is 2+2?" },
};

static char *render(struct llm_file *f, const char *name, const struct llm_chat_msg *m, size_t n,
                    int agp)
{
    char *out = NULL;
    llm_status s = llm_chat_render(f, name, m, n, agp, &out);
    cr_assert_eq(s, LLM_OK, "%s: %s", name ? name : "(template)", llm_error_detail(s));
    return out;
}

static void expect(struct llm_file *f, const char *name, const struct llm_chat_msg *m, size_t n,
                   int agp, const char *want)
{
    char *got = render(f, name, m, n, agp);
    cr_assert_str_eq(got, want, "%s", name ? name : "(template)");
    llm_free(got);
}

/* A file holding only a chat template. */
static struct llm_file *with_template(const char *tmpl)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "t.llm", "synthetic"), LLM_OK);
    cr_assert_eq(llm_meta_set_str(f->meta, "chat_template", tmpl), LLM_OK);
    return f;
}

Test(chat, chatml)
{
    expect(NULL, "chatml", conv, 4, 1,
           "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
           "<|im_start|>assistant\nHi!<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
           "<|im_start|>assistant\n");
    expect(NULL, "chatml", conv + 1, 1, 0, "<|im_start|>user\nHello<|im_end|>\n");
}

Test(chat, llama2)
{
    expect(NULL, "llama2", conv, 4, 1,
           "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello [/INST] Hi! </s><s>[INST] What is "
           "2+2? [/INST]");
    /* roles must alternate, as the template raises */
    const struct llm_chat_msg bad[] = { { "user", "a" }, { "user", "b" } };
    char *out = NULL;
    llm_status s = llm_chat_render(NULL, "llama2", bad, 2, 1, &out);
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(s), "alternate"), "%s", llm_error_detail(s));
}

Test(chat, llama3)
{
    expect(NULL, "llama3", conv, 4, 1,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are "
           "terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_"
           "header_id|>assistant<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>user<|end_"
           "header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

Test(chat, llama31_date_header)
{
    struct llm_file *f = with_template(
        "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" "
        "%}{%- endif %}{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting "
        "Knowledge Date: December 2023\\n\" }}<|end_header_id|>");
    expect(f, NULL, conv, 4, 1,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
           "December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|><|start_header_id|>"
           "user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
           "\n\nHi!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|"
           "start_header_id|>assistant<|end_header_id|>\n\n");
    llm_file_free(f);
}

Test(chat, mistral_variants)
{
    expect(NULL, "mistral", conv, 4, 1,
           "<s> [INST] You are terse.\n\nHello [/INST] Hi!</s> [INST] What is 2+2? [/INST]");
    expect(NULL, "mistral-v3", conv, 4, 1,
           "<s>[INST] Hello[/INST] Hi!</s>[INST] You are terse.\n\nWhat is 2+2?[/INST]");
    expect(NULL, "mistral-v3-tekken", conv, 4, 1,
           "<s>[INST]Hello[/INST]Hi!</s>[INST]You are terse.\n\nWhat is 2+2?[/INST]");
    expect(NULL, "mistral-v7", conv, 4, 1,
           "<s>[SYSTEM_PROMPT] You are terse.[/SYSTEM_PROMPT][INST] Hello[/INST] Hi!</s>[INST] "
           "What is 2+2?[/INST]");
}

Test(chat, zephyr)
{
    expect(NULL, "zephyr", conv, 4, 1,
           "<|system|>\nYou are terse.</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi!</s>\n<|user|>"
           "\nWhat is 2+2?</s>\n<|assistant|>\n");
}

Test(chat, phi3)
{
    expect(NULL, "phi3", conv, 4, 1,
           "<|system|>\nYou are terse.<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi!<|end|>\n"
           "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n");
    /* Phi-3.5: without the generation prompt the template appends EOS */
    expect(NULL, "phi3", conv + 1, 1, 0, "<|user|>\nHello<|end|>\n<|endoftext|>");
    /* Phi-3-mini's template drops the system message */
    struct llm_file *f = with_template(
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
        "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}"
        "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\\n'}}"
        "{% endif %}{% endfor %}");
    expect(f, NULL, conv, 4, 1,
           "<s><|user|>\nHello<|end|>\n<|assistant|>\nHi!<|end|>\n<|user|>\nWhat is "
           "2+2?<|end|>\n<|assistant|>\n");
    llm_file_free(f);
}

Test(chat, gemma)
{
    expect(NULL, "gemma", conv + 1, 3, 1,
           "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi!<end_of_turn>\n"
           "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n");
    /* a system message leads the first user turn (Gemma 3, llama.cpp) */
    expect(NULL, "gemma", conv, 2, 0,
           "<bos><start_of_turn>user\nYou are terse.\n\nHello<end_of_turn>\n");
}

Test(chat, unknown_is_unsupported_with_names)
{
    char *out = NULL;
    llm_status s = llm_chat_render(NULL, "vicuna", conv, 4, 1, &out);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "chatml, llama2, llama3, mistral, zephyr, phi3, gemma"),
              "%s", llm_error_detail(s));
    struct llm_file *f = with_template("{% for m in messages %}USER: {{ m.content }}{% endfor %}");
    s = llm_chat_render(f, NULL, conv, 4, 1, &out);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "zephyr"), "%s", llm_error_detail(s));
    llm_file_free(f);
    cr_assert_str_eq(llm_chat_template_names(), "chatml, llama2, llama3, mistral, zephyr, phi3, gemma");
}

/* Templates recognised by their markers (formats.md §5.4), rendered like the
 * family they belong to. */
Test(chat, detection)
{
    static const struct { const char *tmpl, *want_name; } cases[] = {
        { "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}",
          "chatml" },
        { "{% if messages[0]['role'] == 'system' %}{{ bos_token + '[INST] <<SYS>>\\n' }}{% endif "
          "%}{{ content.strip() + ' [/INST]' }}",
          "llama2" },
        { "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
          "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}",
          "llama3" },
        { "{{ bos_token }}{% for m in messages %}{{ ' [INST] ' + system_message + '\\n\\n' + "
          "m['content'] + ' [/INST]' }}{% endfor %}",
          "mistral" },
        { "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
          "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
          "'<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% endfor %}",
          "zephyr" },
        { "{% for message in messages %}{% if message['role'] == 'system' and message['content'] "
          "%}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == "
          "'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] "
          "== 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif "
          "%}{% endfor %}",
          "phi3" },
        { "{{ bos_token }}{% for m in messages %}{{ '<start_of_turn>' + role + '\\n' + "
          "m['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}",
          "gemma" },
    };
    const struct llm_chat_msg *m = conv;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t off = strcmp(cases[i].want_name, "gemma") == 0 ? 1 : 0;
        struct llm_file *f = with_template(cases[i].tmpl);
        char *a = render(f, NULL, m + off, 4 - off, 1);
        char *b = render(NULL, cases[i].want_name, m + off, 4 - off, 1);
        cr_assert_str_eq(a, b, "template %zu should render as %s", i, cases[i].want_name);
        llm_free(a);
        llm_free(b);
        llm_file_free(f);
    }
}

Test(chat, smollm2_template_is_chatml_with_default_system)
{
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) {
        cr_skip_test("%s is absent (make demo fetches it)", path);
        return;
    }
    struct llm_file *f;
    llm_status s = llm_gguf_open(&f, path, NULL);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    /* with a system message: plain ChatML */
    expect(f, NULL, conv, 4, 1,
           "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
           "<|im_start|>assistant\nHi!<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
           "<|im_start|>assistant\n");
    /* without: SmolLM2's default system turn (formats.md §5.2) */
    expect(f, NULL, conv + 1, 3, 1,
           "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
           "Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi!<|im_end|>"
           "\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
    /* named explicitly, the model's own variant is kept */
    char *a = render(f, "chatml", conv + 1, 1, 1);
    cr_assert(strstr(a, "named SmolLM"), "%s", a);
    llm_free(a);
    llm_file_free(f);
}
