/* chat.c: chat prompts rendered as the published Hugging Face templates
 * render them (formats.md §5.2), for the families we recognise.
 *
 * There is no Jinja engine: the family (and the variant within it) is
 * recognised from the template text by marker substrings, in the spirit of
 * llama.cpp's llm_chat_detect_template (§5.4), and each family is rendered by
 * code that reproduces its template. What a template carries as data is read
 * from it: ChatML's default system turn (SmolLM2, Qwen), Llama 3.1's date.
 * The rendered text contains the BOS text where the template emits
 * bos_token; tokenize it with LLM_TOK_PARSE_SPECIAL and without
 * LLM_TOK_ADD_BOS. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../format/file.h"
#include "tokenizer.h"

enum family { F_CHATML, F_LLAMA2, F_LLAMA3, F_MISTRAL, F_ZEPHYR, F_PHI3, F_GEMMA, F_NONE };

static const char *const family_names[] = { "chatml", "llama2", "llama3", "mistral",
                                            "zephyr", "phi3",   "gemma" };

enum { MV_V1, MV_V3, MV_TEKKEN, MV_V7 }; /* Mistral variants (formats.md §5.2) */

struct style {
    enum family fam;
    int variant;           /* Mistral: MV_*; Phi-3: 1 = Phi-3-mini (BOS, no system) */
    char *default_system;  /* ChatML: the turn added when messages[0] is not a system one */
    int llama31;           /* Llama 3.1+: system turn with the knowledge/today dates */
    char date[32];
};

const char *llm_chat_template_names(void)
{
    return "chatml, llama2, llama3, mistral, zephyr, phi3, gemma";
}

/* ---- a growing string ------------------------------------------------------ */

struct sb {
    char *s;
    size_t n, cap;
    llm_status err;
};

static void sb_addn(struct sb *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (b->n + n + 1 > b->cap && (b->err = llm_grow((void **)&b->s, &b->cap, b->n + n + 1, 1)))
        return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_add(struct sb *b, const char *s)
{
    sb_addn(b, s, strlen(s));
}

static int py_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* Python's str.strip() (Jinja's trim) for ASCII whitespace. */
static void sb_add_trim(struct sb *b, const char *s)
{
    size_t n = strlen(s);
    while (n && py_space(*s))
        s++, n--;
    while (n && py_space(s[n - 1]))
        n--;
    sb_addn(b, s, n);
}

/* ---- recognising a template --------------------------------------------------- */

static int has(const char *tmpl, const char *s)
{
    return strstr(tmpl, s) != NULL;
}

/* The ChatML default system text: a string literal of the template that is a
 * whole system turn, '<|im_start|>system\n...<|im_end|>'. */
static char *chatml_default_system(const char *tmpl)
{
    static const char head[] = "<|im_start|>system\n", tail[] = "<|im_end|>";
    for (const char *p = tmpl; *p; p++) {
        if (*p != '\'' && *p != '"')
            continue;
        char q = *p;
        /* decode the literal's escapes into a scratch copy */
        size_t cap = strlen(p) + 1, k = 0;
        char *lit = llm_malloc(cap);
        if (!lit)
            return NULL;
        const char *e = p + 1;
        for (; *e && *e != q; e++) {
            if (*e == '\\' && e[1]) {
                e++;
                lit[k++] = *e == 'n' ? '\n' : *e == 't' ? '\t' : *e == 'r' ? '\r' : *e;
            } else {
                lit[k++] = *e;
            }
        }
        lit[k] = 0;
        char *end = strstr(lit, tail);
        if (strncmp(lit, head, sizeof head - 1) == 0 && end && end > lit + sizeof head - 1) {
            *end = 0;
            memmove(lit, lit + sizeof head - 1, strlen(lit + sizeof head - 1) + 1);
            return lit;
        }
        llm_free(lit);
        if (!*e)
            break;
        p = e;
    }
    return NULL;
}

static void llama31_date(const char *tmpl, char *out, size_t n)
{
    snprintf(out, n, "26 Jul 2024"); /* the 3.1 template's default */
    if (has(tmpl, "strftime_now")) {
        time_t now = time(NULL);
        struct tm tm;
        if (gmtime_r(&now, &tm))
            strftime(out, n, "%d %b %Y", &tm);
        return;
    }
    const char *p = strstr(tmpl, "date_string = \"");
    if (p) {
        p += strlen("date_string = \"");
        const char *e = strchr(p, '"');
        if (e && (size_t)(e - p) < n) {
            memcpy(out, p, (size_t)(e - p));
            out[e - p] = 0;
        }
    }
}

static int mistral_variant(const char *tmpl)
{
    if (has(tmpl, "[SYSTEM_PROMPT]"))
        return MV_V7;
    if (has(tmpl, "' [INST] ' + system_message") || has(tmpl, "[AVAILABLE_TOOLS]")) {
        if (has(tmpl, " [INST]"))
            return MV_V1;
        return has(tmpl, "\"[INST]\"") ? MV_TEKKEN : MV_V3;
    }
    return MV_V1;
}

/* The family of a template text (or of a name); F_NONE when unknown. */
static enum family detect(const char *tmpl, struct style *st)
{
    static const struct { const char *name; enum family fam; int variant; } aliases[] = {
        { "mistral-v1", F_MISTRAL, MV_V1 },        { "mistral-v3", F_MISTRAL, MV_V3 },
        { "mistral-v3-tekken", F_MISTRAL, MV_TEKKEN }, { "mistral-v7", F_MISTRAL, MV_V7 },
        { "llama2-sys", F_LLAMA2, 0 },             { "llama2-sys-bos", F_LLAMA2, 0 },
        { "llama2-sys-strip", F_LLAMA2, 0 },
    };
    st->variant = 0;
    for (size_t i = 0; i < sizeof family_names / sizeof family_names[0]; i++)
        if (strcmp(tmpl, family_names[i]) == 0)
            return (enum family)i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(tmpl, aliases[i].name) == 0) {
            st->variant = aliases[i].variant;
            return aliases[i].fam;
        }
    if (has(tmpl, "<|im_start|>"))
        return has(tmpl, "<|im_sep|>") ? F_NONE : F_CHATML; /* phi4 is another layout */
    if (strncmp(tmpl, "mistral", 7) == 0 || has(tmpl, "[INST]")) {
        if (has(tmpl, "<<SYS>>"))
            return F_LLAMA2;
        st->variant = mistral_variant(tmpl);
        return F_MISTRAL;
    }
    if (has(tmpl, "<|assistant|>") && has(tmpl, "<|end|>")) {
        /* Phi-3-mini's template has no system branch and starts with BOS */
        st->variant = !has(tmpl, "'system'") && !has(tmpl, "\"system\"");
        return F_PHI3;
    }
    if (has(tmpl, "<|assistant|>") && has(tmpl, "<|user|>") &&
        (has(tmpl, "eos_token") || has(tmpl, "</s>") || has(tmpl, "<|endoftext|>")))
        return F_ZEPHYR;
    if (has(tmpl, "<start_of_turn>"))
        return F_GEMMA;
    if (has(tmpl, "<|start_header_id|>") && has(tmpl, "<|end_header_id|>"))
        return F_LLAMA3;
    return F_NONE;
}

/* ---- rendering ------------------------------------------------------------------ */

/* The text of a special token of the file's vocabulary, or `dflt`. */
static char *special_text(struct llm_file *f, const char *key, const char *dflt)
{
    int64_t id;
    struct llm_vocab_view v;
    if (f && llm_meta_get_i64(f->meta, key, &id) == LLM_OK && llm_file_vocab(f, &v) == LLM_OK &&
        id >= 0 && id < (int64_t)v.n_tokens) {
        uint32_t a = v.offsets[id], b = v.offsets[id + 1];
        if (b > a)
            return llm_strndup((const char *)v.bytes + a, b - a);
    }
    llm_error_clear();
    return llm_strdup(dflt);
}

static int is_role(const struct llm_chat_msg *m, const char *r)
{
    return m->role && strcmp(m->role, r) == 0;
}

/* After an optional system message, user and assistant must alternate,
 * starting with user (the Llama 2, Mistral and Gemma templates raise). */
static llm_status check_alternation(const struct llm_chat_msg *m, size_t n, const char *fam)
{
    for (size_t i = 0; i < n; i++) {
        const char *want = i % 2 == 0 ? "user" : "assistant";
        if (!is_role(&m[i], want))
            return llm_error_set(LLM_E_INVALID,
                                 "%s chat template: message %zu has role '%s' where '%s' is "
                                 "expected (roles must alternate user/assistant)",
                                 fam, i + 1, m[i].role ? m[i].role : "(null)", want);
    }
    return LLM_OK;
}

static void render_chatml(struct sb *b, const struct style *st, const struct llm_chat_msg *m,
                          size_t n, int agp)
{
    if (st->default_system && (n == 0 || !is_role(&m[0], "system"))) {
        sb_add(b, "<|im_start|>system\n");
        sb_add(b, st->default_system);
        sb_add(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        sb_add(b, "<|im_start|>");
        sb_add(b, m[i].role);
        sb_add(b, "\n");
        sb_add(b, m[i].content);
        sb_add(b, "<|im_end|>\n");
    }
    if (agp)
        sb_add(b, "<|im_start|>assistant\n");
}

static llm_status render_llama2(struct sb *b, const char *bos, const char *eos,
                                const struct llm_chat_msg *m, size_t n)
{
    const char *sys = n && is_role(&m[0], "system") ? m[0].content : NULL;
    if (sys)
        m++, n--;
    LLM_TRY(check_alternation(m, n, "llama2"));
    for (size_t i = 0; i < n; i++) {
        struct sb c = { 0 };
        if (i == 0 && sys) {
            sb_add(&c, "<<SYS>>\n");
            sb_add(&c, sys);
            sb_add(&c, "\n<</SYS>>\n\n");
        }
        sb_add(&c, m[i].content);
        if (c.err)
            return c.err;
        if (i % 2 == 0) {
            sb_add(b, bos);
            sb_add(b, "[INST] ");
            sb_add_trim(b, c.s);
            sb_add(b, " [/INST]");
        } else {
            sb_add(b, " ");
            sb_add_trim(b, c.s);
            sb_add(b, " ");
            sb_add(b, eos);
        }
        llm_free(c.s);
    }
    return LLM_OK;
}

static void llama3_turn(struct sb *b, const char *role, const char *content)
{
    sb_add(b, "<|start_header_id|>");
    sb_add(b, role);
    sb_add(b, "<|end_header_id|>\n\n");
    sb_add_trim(b, content);
    sb_add(b, "<|eot_id|>");
}

static void render_llama3(struct sb *b, const struct style *st, const char *bos,
                          const struct llm_chat_msg *m, size_t n, int agp)
{
    if (st->llama31) {
        const char *sys = n && is_role(&m[0], "system") ? m[0].content : "";
        if (n && is_role(&m[0], "system"))
            m++, n--;
        sb_add(b, bos);
        sb_add(b, "<|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: ");
        sb_add(b, st->date);
        sb_add(b, "\n\n");
        sb_add_trim(b, sys);
        sb_add(b, "<|eot_id|>");
    } else if (n) {
        sb_add(b, bos);
    }
    for (size_t i = 0; i < n; i++)
        llama3_turn(b, m[i].role, m[i].content);
    if (agp)
        sb_add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static llm_status render_mistral(struct sb *b, const struct style *st, const char *bos,
                                 const char *eos, const struct llm_chat_msg *m, size_t n)
{
    const char *sys = n && is_role(&m[0], "system") ? m[0].content : NULL;
    if (sys)
        m++, n--;
    LLM_TRY(check_alternation(m, n, "mistral"));
    size_t last_user = n ? (n - 1) / 2 * 2 : 0;
    sb_add(b, bos);
    if (st->variant == MV_V7 && sys) {
        sb_add(b, "[SYSTEM_PROMPT] ");
        sb_add(b, sys);
        sb_add(b, "[/SYSTEM_PROMPT]");
    }
    for (size_t i = 0; i < n; i++) {
        if (i % 2 == 0) {
            /* V1 puts the system prompt in the first user turn, V3 and Tekken in the last */
            int with_sys = sys && ((st->variant == MV_V1 && i == 0) ||
                                   ((st->variant == MV_V3 || st->variant == MV_TEKKEN) &&
                                    i == last_user));
            sb_add(b, st->variant == MV_V1 ? " [INST] " : st->variant == MV_TEKKEN ? "[INST]"
                                                                                    : "[INST] ");
            if (with_sys) {
                sb_add(b, sys);
                sb_add(b, "\n\n");
            }
            sb_add(b, m[i].content);
            sb_add(b, st->variant == MV_V1 ? " [/INST]" : "[/INST]");
        } else {
            if (st->variant != MV_TEKKEN)
                sb_add(b, " ");
            sb_add(b, m[i].content);
            sb_add(b, eos);
        }
    }
    return LLM_OK;
}

static llm_status render_zephyr(struct sb *b, const char *eos, const struct llm_chat_msg *m,
                                size_t n, int agp)
{
    for (size_t i = 0; i < n; i++) {
        if (!is_role(&m[i], "user") && !is_role(&m[i], "system") && !is_role(&m[i], "assistant"))
            return llm_error_set(LLM_E_INVALID, "zephyr chat template: role '%s' is not supported",
                                 m[i].role ? m[i].role : "(null)");
        sb_add(b, "<|");
        sb_add(b, m[i].role);
        sb_add(b, "|>\n");
        sb_add(b, m[i].content);
        sb_add(b, eos);
        sb_add(b, "\n");
        if (i + 1 == n && agp)
            sb_add(b, "<|assistant|>\n");
    }
    return LLM_OK;
}

static void render_phi3(struct sb *b, const struct style *st, const char *bos, const char *eos,
                        const struct llm_chat_msg *m, size_t n, int agp)
{
    if (st->variant == 1) {
        /* Phi-3-mini: the system message is dropped; the assistant header
         * follows every user turn */
        sb_add(b, bos);
        for (size_t i = 0; i < n; i++) {
            if (is_role(&m[i], "user")) {
                sb_add(b, "<|user|>\n");
                sb_add(b, m[i].content);
                sb_add(b, "<|end|>\n<|assistant|>\n");
            } else if (is_role(&m[i], "assistant")) {
                sb_add(b, m[i].content);
                sb_add(b, "<|end|>\n");
            }
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (is_role(&m[i], "system") && !*m[i].content)
            continue;
        if (!is_role(&m[i], "system") && !is_role(&m[i], "user") && !is_role(&m[i], "assistant"))
            continue;
        sb_add(b, "<|");
        sb_add(b, m[i].role);
        sb_add(b, "|>\n");
        sb_add(b, m[i].content);
        sb_add(b, "<|end|>\n");
    }
    sb_add(b, agp ? "<|assistant|>\n" : eos);
}

static llm_status render_gemma(struct sb *b, const char *bos, const struct llm_chat_msg *m,
                               size_t n, int agp)
{
    /* Gemma 1/2 templates refuse a system message; Gemma 3 (and llama.cpp)
     * put it at the head of the first user turn, which we do */
    const char *sys = n && is_role(&m[0], "system") ? m[0].content : NULL;
    if (sys)
        m++, n--;
    LLM_TRY(check_alternation(m, n, "gemma"));
    sb_add(b, bos);
    for (size_t i = 0; i < n; i++) {
        sb_add(b, "<start_of_turn>");
        sb_add(b, i % 2 == 0 ? "user" : "model");
        sb_add(b, "\n");
        if (i == 0 && sys) {
            sb_add(b, sys);
            sb_add(b, "\n\n");
        }
        sb_add_trim(b, m[i].content);
        sb_add(b, "<end_of_turn>\n");
    }
    if (agp)
        sb_add(b, "<start_of_turn>model\n");
    return LLM_OK;
}

llm_status llm_chat_render(struct llm_file *f, const char *name, const struct llm_chat_msg *msgs,
                           size_t n, int add_generation_prompt, char **out)
{
    const char *fname = f && f->path ? f->path : "model";
    const char *tmpl = NULL;
    if (f && llm_meta_get_str(f->meta, "chat_template", &tmpl) != LLM_OK)
        tmpl = NULL;
    llm_error_clear();
    struct style st = { 0 }, ft = { 0 };
    enum family ffam = tmpl ? detect(tmpl, &ft) : F_NONE;
    if (name) {
        st.fam = detect(name, &st);
        if (st.fam == F_NONE)
            return llm_error_set(LLM_E_UNSUPPORTED, "unknown chat template '%s' (known: %s)", name,
                                 llm_chat_template_names());
        if (ffam == st.fam && strcmp(name, family_names[st.fam]) == 0)
            st.variant = ft.variant; /* the model's own variant of the family */
    } else if (!tmpl) {
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: the file has no chat template; name one of: %s", fname,
                             llm_chat_template_names());
    } else if (ffam == F_NONE) {
        return llm_error_set(LLM_E_UNSUPPORTED,
                             "%s: the chat template is not one we recognise; name one of: %s",
                             fname, llm_chat_template_names());
    } else {
        st = ft;
        st.fam = ffam;
    }
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return llm_error_set(LLM_E_INVALID, "chat message %zu has no role or no content", i + 1);
    /* data the model's template carries */
    const char *src = tmpl && ffam == st.fam ? tmpl : NULL;
    if (st.fam == F_CHATML && src)
        st.default_system = chatml_default_system(src);
    if (st.fam == F_LLAMA3 && src && has(src, "Cutting Knowledge Date")) {
        st.llama31 = 1;
        llama31_date(src, st.date, sizeof st.date);
    }

    static const char *const dflt_bos[] = { "", "<s>", "<|begin_of_text|>", "<s>", "<s>", "<s>",
                                            "<bos>" };
    static const char *const dflt_eos[] = { "", "</s>", "<|eot_id|>", "</s>", "</s>",
                                            "<|endoftext|>", "<eos>" };
    char *bos = special_text(f, "tokenizer.bos_id", dflt_bos[st.fam]);
    char *eos = special_text(f, "tokenizer.eos_id", dflt_eos[st.fam]);
    struct sb b = { 0 };
    llm_status s = LLM_OK;
    if (!bos || !eos) {
        s = LLM_E_NOMEM;
        goto done;
    }
    sb_add(&b, ""); /* an empty conversation still gives a string */
    switch (st.fam) {
    case F_CHATML: render_chatml(&b, &st, msgs, n, add_generation_prompt); break;
    case F_LLAMA2: s = render_llama2(&b, bos, eos, msgs, n); break;
    case F_LLAMA3: render_llama3(&b, &st, bos, msgs, n, add_generation_prompt); break;
    case F_MISTRAL: s = render_mistral(&b, &st, bos, eos, msgs, n); break;
    case F_ZEPHYR: s = render_zephyr(&b, eos, msgs, n, add_generation_prompt); break;
    case F_PHI3: render_phi3(&b, &st, bos, eos, msgs, n, add_generation_prompt); break;
    case F_GEMMA: s = render_gemma(&b, bos, msgs, n, add_generation_prompt); break;
    case F_NONE: break;
    }
    if (!s)
        s = b.err;
done:
    llm_free(bos);
    llm_free(eos);
    llm_free(st.default_system);
    if (s) {
        llm_free(b.s);
        return s;
    }
    *out = b.s;
    return LLM_OK;
}
