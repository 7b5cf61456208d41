/* pretok.c: the byte-level BPE pre-tokenizer (formats.md §2.4, §2.5).
 *
 * A fragment is split by a list of regexes; each regex subdivides the pieces
 * the previous ones made, and the text between matches stays a piece. The
 * splits are llama.cpp's, not PCRE2's: its two hand-written matchers (the
 * GPT-2 and Llama-3 regexes) are reproduced as code, and every other regex
 * runs on the text as llama.cpp's std::regex sees it — with \p{..} present,
 * every code point >= 128 collapsed to one byte naming its category and the
 * \p{..} classes rewritten to match those bytes; without, on code points
 * whose non-ASCII whitespace became U+000B. PCRE2 then gives the same
 * leftmost-first matches as ECMAScript std::regex. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "../common/alloc.h"
#include "tok_impl.h"

enum re_kind { RE_CUSTOM_GPT2, RE_CUSTOM_LLAMA3, RE_COLLAPSED, RE_UTF };

struct tok_re {
    enum re_kind kind;
    pcre2_code *code;
};

#define MAX_RE 8

struct llm_tok_pretok {
    struct tok_re re[MAX_RE];
    size_t n;
    int need_coll, need_utf;
};

/* ---- the regex lists of llama.cpp's llm_tokenizer_bpe -------------------- */

#define R_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define R_LLAMA3                                                                               \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_LLAMA3_ORIG                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                  \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN2                                                                                \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_BLOOM " ?[^(\\s|.,!?…。，、।۔،)]+"
#define R_CJK "[一-龥ࠀ-一가-퟿]+"

static const char *const set_default[] = { "[\\p{P}\\$\\+<=>\\^~\\|]+", R_GPT2, "\\p{N}+",
                                           "[0-9][0-9][0-9]", NULL };
static const char *const set_llama3[] = { R_LLAMA3, NULL };
static const char *const set_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    R_CJK,
    "\\p{N}+",
    NULL,
};
static const char *const set_deepseek3[] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const set_deepseek_coder[] = { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", R_CJK,
                                                  "\\p{N}", NULL };
static const char *const set_falcon[] = { "[\\p{P}\\$\\+<=>\\^~\\|`]+", R_GPT2, "[0-9][0-9][0-9]",
                                          NULL };
static const char *const set_starcoder[] = { "\\p{N}", R_GPT2, NULL };
static const char *const set_gpt2[] = { R_GPT2, NULL };
static const char *const set_qwen2[] = { R_QWEN2, NULL };
static const char *const set_bloom[] = { R_BLOOM, NULL };
static const char *const set_viking[] = { R_BLOOM, "\\p{N}", NULL };
static const char *const set_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?"
    "((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const set_chameleon[] = {
    "<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]", R_GPT2, NULL,
};

static const struct {
    const char *names; /* '|'-separated */
    const char *const *set;
} pre_sets[] = {
    { "default", set_default },
    { "llama3|llama-v3|llama-bpe|falcon3|dbrx|smaug-bpe|chatglm-bpe", set_llama3 },
    { "deepseek-llm", set_deepseek_llm },
    { "deepseek-coder", set_deepseek_coder },
    { "deepseek-v3", set_deepseek3 },
    { "falcon", set_falcon },
    { "starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", set_starcoder },
    { "gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|"
      "roberta-bpe|mpt|olmo|jais",
      set_gpt2 },
    { "qwen2|deepseek-r1-qwen|stablelm2|megrez", set_qwen2 },
    { "poro-chat|bloom|gpt3-finnish", set_bloom },
    { "viking", set_viking },
    { "tekken", set_tekken },
    { "chameleon", set_chameleon },
};

static int name_in(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = names;;) {
        const char *bar = strchr(p, '|');
        size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k == n && memcmp(p, name, n) == 0)
            return 1;
        if (!bar)
            return 0;
        p = bar + 1;
    }
}

static const char *const *find_set(const char *pre)
{
    if (!pre || !*pre)
        return set_default; /* llama.cpp: missing pre-tokenizer -> default */
    for (size_t i = 0; i < sizeof pre_sets / sizeof pre_sets[0]; i++)
        if (name_in(pre_sets[i].names, pre))
            return pre_sets[i].set;
    return NULL;
}

/* ---- compiling ------------------------------------------------------------ */

/* llama.cpp's k_ucat_enum: the \p{..} names it understands. */
static int ucat_byte(const char *p, size_t *len, const char **members)
{
    static const struct { const char *name; uint8_t byte; const char *members; } cats[] = {
        { "\\p{N}", 0xD1, "0-9" },
        { "\\p{L}", 0xD2, "A-Za-z" },
        { "\\p{P}", 0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}" },
        { "\\p{M}", 0xD4, "" },
        { "\\p{S}", 0xD5, "\\$\\+<->^`\\|" },
        { "\\p{Lu}", 0xD2, "A-Za-z" },
        { "\\p{Ll}", 0xD2, "A-Za-z" },
        { "\\p{Lt}", 0xD2, "A-Za-z" },
        { "\\p{Lm}", 0xD2, "A-Za-z" },
        { "\\p{Lo}", 0xD2, "A-Za-z" },
    };
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++) {
        size_t n = strlen(cats[i].name);
        if (strncmp(p, cats[i].name, n) == 0) {
            *len = n;
            *members = cats[i].members;
            return cats[i].byte;
        }
    }
    return -1;
}

static int uses_ucat(const char *re)
{
    for (const char *p = strstr(re, "\\p{"); p; p = strstr(p + 1, "\\p{")) {
        size_t len;
        const char *m;
        if (ucat_byte(p, &len, &m) >= 0)
            return 1;
    }
    return 0;
}

/* The regex rewritten for the collapsed text (llama.cpp's
 * regex_expr_collapsed, including its simple notion of "inside []"). */
static char *collapse_regex(const char *re)
{
    size_t n = strlen(re);
    char *out = llm_malloc(n * 8 + 1);
    if (!out)
        return NULL;
    size_t k = 0;
    int inside = 0;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
            out[k++] = '[';
            inside = 1;
            continue;
        }
        if (inside && re[i] == ']' && re[i - 1] != '\\') {
            out[k++] = ']';
            inside = 0;
            continue;
        }
        size_t len;
        const char *members;
        int byte = re[i] == '\\' ? ucat_byte(re + i, &len, &members) : -1;
        if (byte >= 0) {
            static const char hex[] = "0123456789ABCDEF";
            if (!inside)
                out[k++] = '[';
            out[k++] = '\\';
            out[k++] = 'x';
            out[k++] = hex[byte >> 4];
            out[k++] = hex[byte & 15];
            memcpy(out + k, members, strlen(members));
            k += strlen(members);
            if (!inside)
                out[k++] = ']';
            i += len - 1;
            continue;
        }
        out[k++] = re[i];
    }
    out[k] = 0;
    return out;
}

static int is_gpt2_regex(const char *re)
{
    return strcmp(re, R_GPT2) == 0 || strcmp(re, R_GPT2 "|\\s+") == 0;
}

static llm_status compile(struct tok_re *r, const char *re, const char *fname)
{
    if (is_gpt2_regex(re)) {
        r->kind = RE_CUSTOM_GPT2;
        return LLM_OK;
    }
    if (strcmp(re, R_LLAMA3) == 0 || strcmp(re, R_LLAMA3_ORIG) == 0) {
        r->kind = RE_CUSTOM_LLAMA3;
        return LLM_OK;
    }
    char *pat = NULL;
    uint32_t opts = PCRE2_DOLLAR_ENDONLY; /* ECMAScript: $ only at the end */
    if (uses_ucat(re)) {
        for (const char *p = re; *p; p++)
            if ((uint8_t)*p >= 0x80)
                return llm_error_set(LLM_E_UNSUPPORTED,
                                     "%s: pre-tokenizer regex '%s' mixes \\p{..} and non-ASCII "
                                     "characters",
                                     fname, re);
        pat = collapse_regex(re);
        if (!pat)
            return LLM_E_NOMEM;
        r->kind = RE_COLLAPSED;
    } else {
        r->kind = RE_UTF;
        opts |= PCRE2_UTF;
    }
    int err;
    PCRE2_SIZE at;
    r->code = pcre2_compile((PCRE2_SPTR)(pat ? pat : re), PCRE2_ZERO_TERMINATED, opts, &err, &at,
                            NULL);
    llm_free(pat);
    if (!r->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return llm_error_set(LLM_E_FORMAT, "%s: pre-tokenizer regex '%s': %s at offset %zu",
                             fname, re, (const char *)msg, (size_t)at);
    }
    (void)pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
    return LLM_OK;
}

llm_status llm_tok_pretok_new(struct llm_tok_pretok **out, const char *pre,
                              const char *const *regexes, size_t n, const char *fname)
{
    const char *const *set = regexes;
    if (!set) {
        set = find_set(pre);
        if (!set)
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: unknown pre-tokenizer '%s'", fname, pre);
        for (n = 0; set[n]; n++)
            ;
    }
    if (n > MAX_RE)
        return llm_error_set(LLM_E_UNSUPPORTED, "%s: %zu pre-tokenizer regexes (at most %d)",
                             fname, n, MAX_RE);
    struct llm_tok_pretok *p = llm_calloc(1, sizeof *p);
    if (!p)
        return LLM_E_NOMEM;
    llm_status s = LLM_OK;
    for (size_t i = 0; i < n && !s; i++) {
        s = compile(&p->re[i], set[i], fname);
        p->n = i + 1;
        if (!s && p->re[i].kind == RE_COLLAPSED)
            p->need_coll = 1;
        if (!s && p->re[i].kind == RE_UTF)
            p->need_utf = 1;
    }
    if (s) {
        llm_tok_pretok_free(p);
        return s;
    }
    *out = p;
    return LLM_OK;
}

void llm_tok_pretok_free(struct llm_tok_pretok *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        pcre2_code_free(p->re[i].code);
    llm_free(p);
}

void llm_tok_split_free(struct llm_tok_split *s)
{
    llm_free(s->cp);
    llm_free(s->flags);
    llm_free(s->boff);
    llm_free(s->coll);
    llm_free(s->u8);
    llm_free(s->u8off);
    llm_free(s->u8cp);
    llm_free(s->pieces);
    llm_free(s->next);
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    memset(s, 0, sizeof *s);
}

/* ---- splitting ------------------------------------------------------------- */

static llm_status push_piece(struct llm_tok_split *s, size_t len)
{
    if (len == 0)
        return LLM_OK; /* llama.cpp keeps empty matches as empty words: they yield nothing */
    if (s->npieces == s->cap_next)
        LLM_TRY(llm_grow((void **)&s->next, &s->cap_next, s->npieces + 1, sizeof *s->next));
    s->next[s->npieces++] = len;
    return LLM_OK;
}

#define OUT_OF_RANGE 0xFFFFFFFFu

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * over code points [a, b), as llama.cpp's unicode_regex_split_custom_gpt2. */
static llm_status split_gpt2(struct llm_tok_split *s, size_t a, size_t b)
{
    const uint32_t *cp = s->cp;
    const uint16_t *fl = s->flags;
#define F(i) ((i) < b ? fl[i] : 0)
#define C(i) ((i) < b ? cp[i] : OUT_OF_RANGE)
    size_t pos = a, prev = a;
    while (pos < b) {
        uint32_t c = cp[pos];
        uint16_t f = fl[pos];
        if (c == '\'' && pos + 1 < b) {
            uint32_t c1 = cp[pos + 1];
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                pos += 2;
                goto emit;
            }
            if (pos + 2 < b) {
                uint32_t c2 = cp[pos + 2];
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    pos += 3;
                    goto emit;
                }
            }
        }
        uint16_t f2 = c == ' ' ? F(pos + 1) : f;
        if (f2 & TOK_CPT_LETTER) {
            pos += c == ' ';
            while (F(pos) & TOK_CPT_LETTER)
                pos++;
            goto emit;
        }
        if (f2 & TOK_CPT_NUMBER) {
            pos += c == ' ';
            while (F(pos) & TOK_CPT_NUMBER)
                pos++;
            goto emit;
        }
        if (!(f2 & (TOK_CPT_WHITESPACE | TOK_CPT_LETTER | TOK_CPT_NUMBER)) && f2) {
            pos += c == ' ';
            while (F(pos) && !(F(pos) & (TOK_CPT_WHITESPACE | TOK_CPT_LETTER | TOK_CPT_NUMBER)))
                pos++;
            goto emit;
        }
        size_t nws = 0;
        while (F(pos + nws) & TOK_CPT_WHITESPACE)
            nws++;
        if (nws > 1 && C(pos + nws) != OUT_OF_RANGE)
            pos += nws - 1; /* \s+(?!\S): leave the last space to the next word */
        else if (nws > 0)
            pos += nws;
        else
            pos++;
    emit:
        LLM_TRY(push_piece(s, pos - prev));
        prev = pos;
    }
    return LLM_OK;
}

static uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* The Llama-3 regex (formats.md §2.4), as unicode_regex_split_custom_llama3. */
static llm_status split_llama3(struct llm_tok_split *s, size_t a, size_t b)
{
    const uint32_t *cp = s->cp;
    const uint16_t *fl = s->flags;
    size_t pos = a, prev = a;
    while (pos < b) {
        uint32_t c = cp[pos];
        uint16_t f = fl[pos];
        if (c == '\'' && pos + 1 < b) {
            uint32_t c1 = ascii_lower(cp[pos + 1]);
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                pos += 2;
                goto emit;
            }
            if (pos + 2 < b) {
                uint32_t c2 = ascii_lower(cp[pos + 2]);
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    pos += 3;
                    goto emit;
                }
            }
        }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(c == '\r' || c == '\n' || (f & TOK_CPT_NUMBER)) &&
            ((f & TOK_CPT_LETTER) || (F(pos + 1) & TOK_CPT_LETTER))) {
            pos++;
            while (F(pos) & TOK_CPT_LETTER)
                pos++;
            goto emit;
        }
        /* \p{N}{1,3} */
        if (f & TOK_CPT_NUMBER) {
            size_t ini = pos;
            while (F(pos) & TOK_CPT_NUMBER) {
                if (++pos - ini >= 3) {
                    LLM_TRY(push_piece(s, pos - prev));
                    prev = ini = pos;
                }
            }
            goto emit;
        }
        /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
        uint16_t f2 = c == ' ' ? F(pos + 1) : f;
        if (!(f2 & (TOK_CPT_WHITESPACE | TOK_CPT_LETTER | TOK_CPT_NUMBER)) && f) {
            pos += c == ' ';
            while (F(pos) && !(F(pos) & (TOK_CPT_WHITESPACE | TOK_CPT_LETTER | TOK_CPT_NUMBER)))
                pos++;
            while (C(pos) == '\r' || C(pos) == '\n')
                pos++;
            goto emit;
        }
        size_t nws = 0, last_rn = 0;
        while (F(pos + nws) & TOK_CPT_WHITESPACE) {
            uint32_t c2 = cp[pos + nws];
            if (c2 == '\r' || c2 == '\n')
                last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0)
            pos = last_rn; /* \s*[\r\n]+ */
        else if (nws > 1 && C(pos + nws) != OUT_OF_RANGE)
            pos += nws - 1;
        else if (nws > 0)
            pos += nws;
        else
            pos++;
    emit:
        LLM_TRY(push_piece(s, pos - prev));
        prev = pos;
    }
    return LLM_OK;
#undef F
#undef C
}

/* One regex over one piece, std::regex_iterator style: matches and the gaps
 * between them become pieces; an empty match is retried as non-empty at the
 * same place, then the search moves one character on. */
static llm_status split_pcre(const struct tok_re *r, struct llm_tok_split *s, size_t a, size_t b,
                             const char *fname)
{
    if (!s->md) {
        /* long words backtrack deeply (tekken's repeated groups): a JIT
         * stack of up to 256 MiB, then the interpreter on the heap */
        s->md = pcre2_match_data_create(1, NULL);
        s->mctx = pcre2_match_context_create(NULL);
        s->jstack = pcre2_jit_stack_create(64 << 10, 256 << 20, NULL);
        if (!s->md || !s->mctx || !s->jstack)
            return llm_error_set(LLM_E_NOMEM, "%s: out of memory for regex matching", fname);
        pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
        pcre2_set_heap_limit(s->mctx, 4u << 20); /* KiB: 4 GiB */
    }
    int utf = r->kind == RE_UTF;
    const uint8_t *subj = utf ? s->u8 + s->u8off[a] : s->coll + a;
    size_t len = utf ? s->u8off[b] - s->u8off[a] : b - a;
    /* code point index (relative to a) of a subject offset */
#define CPI(o) (utf ? s->u8cp[s->u8off[a] + (o)] - a : (o))
    size_t pos = 0, prev = 0;
    uint32_t opts = 0;
    while (pos <= len) {
        uint32_t mo = opts | (utf ? PCRE2_NO_UTF_CHECK : 0);
        int rc = pcre2_match(r->code, subj, len, pos, mo, s->md, s->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(r->code, subj, len, pos, mo | PCRE2_NO_JIT, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (!opts)
                break;
            opts = 0;
            pos += utf ? llm_tok_utf8_len(subj[pos]) : 1;
            continue;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return llm_error_set(LLM_E_UNSUPPORTED, "%s: pre-tokenizer regex failed: %s", fname,
                                 (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev)
            LLM_TRY(push_piece(s, CPI(ms) - CPI(prev)));
        LLM_TRY(push_piece(s, CPI(me) - CPI(ms)));
        prev = me;
        if (me == ms) {
            if (me == len)
                break;
            opts = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
        } else {
            opts = 0;
        }
        pos = me;
    }
    if (prev < len)
        LLM_TRY(push_piece(s, CPI(len) - CPI(prev)));
#undef CPI
    return LLM_OK;
}

static llm_status reserve(struct llm_tok_split *s, size_t n)
{
    if (n + 1 <= s->cap)
        return LLM_OK;
    size_t cap = n + 1 + n / 2;
    uint32_t *cp = llm_realloc(s->cp, cap * sizeof *cp);
    if (!cp)
        return LLM_E_NOMEM;
    s->cp = cp;
    uint16_t *fl = llm_realloc(s->flags, cap * sizeof *fl);
    if (!fl)
        return LLM_E_NOMEM;
    s->flags = fl;
    uint32_t *bo = llm_realloc(s->boff, cap * sizeof *bo);
    if (!bo)
        return LLM_E_NOMEM;
    s->boff = bo;
    uint8_t *co = llm_realloc(s->coll, cap);
    if (!co)
        return LLM_E_NOMEM;
    s->coll = co;
    uint32_t *uo = llm_realloc(s->u8off, cap * sizeof *uo);
    if (!uo)
        return LLM_E_NOMEM;
    s->u8off = uo;
    s->cap = cap;
    return LLM_OK;
}

/* The text as llama.cpp's std::wregex path sees it, in valid UTF-8. */
static llm_status build_utf(struct llm_tok_split *s, size_t n)
{
    uint64_t need;
    if (!llm_mul_ok(n, 4, &need) || !llm_add_ok(need, 1, &need))
        return llm_error_set(LLM_E_NOMEM, "text too long");
    if (need > s->u8cap) {
        uint8_t *u8 = llm_realloc(s->u8, need);
        if (!u8)
            return LLM_E_NOMEM;
        s->u8 = u8;
        uint32_t *m = llm_realloc(s->u8cp, need * sizeof *m);
        if (!m)
            return LLM_E_NOMEM;
        s->u8cp = m;
        s->u8cap = need;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = s->cp[i];
        if (c > 0x7f && (s->flags[i] & TOK_CPT_WHITESPACE))
            c = 0x0b;
        else if ((c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
            c = 0xfffd;
        s->u8off[i] = (uint32_t)k;
        s->u8cp[k] = (uint32_t)i;
        k += llm_tok_utf8_encode(c, s->u8 + k);
    }
    s->u8off[n] = (uint32_t)k;
    s->u8cp[k] = (uint32_t)n;
    return LLM_OK;
}

static uint8_t collapsed(uint32_t c, uint16_t f)
{
    if (c < 128)
        return (uint8_t)c;
    if (f & TOK_CPT_WHITESPACE)
        return 0x0b;
    switch (f & TOK_CPT_CATEGORIES) {
    case TOK_CPT_NUMBER: return 0xd1;
    case TOK_CPT_LETTER: return 0xd2;
    case TOK_CPT_PUNCT: return 0xd3;
    case TOK_CPT_MARK: return 0xd4;
    case TOK_CPT_SYMBOL: return 0xd5;
    default: return 0xd0;
    }
}

llm_status llm_tok_pretok_split(const struct llm_tok_pretok *p, struct llm_tok_split *s,
                                const uint8_t *text, size_t len)
{
    if (len > UINT32_MAX / 4)
        return llm_error_set(LLM_E_INVALID, "text of %zu bytes is too long to tokenize", len);
    LLM_TRY(reserve(s, len));
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        s->boff[n] = (uint32_t)i;
        i += llm_tok_utf8_decode(text + i, len - i, &s->cp[n]);
        s->flags[n] = llm_tok_cpt_flags(s->cp[n]);
    }
    s->boff[n] = (uint32_t)len;
    if (p->need_coll)
        for (size_t i = 0; i < n; i++)
            s->coll[i] = collapsed(s->cp[i], s->flags[i]);
    if (p->need_utf)
        LLM_TRY(build_utf(s, n));

    /* the piece list starts as the whole fragment */
    s->npieces = 0;
    LLM_TRY(push_piece(s, n));
    for (size_t r = 0; r < p->n; r++) {
        /* the pieces so far move to s->pieces; the new ones go to s->next */
        size_t *tmp = s->pieces, tcap = s->cap_pieces;
        s->pieces = s->next;
        s->cap_pieces = s->cap_next;
        s->next = tmp;
        s->cap_next = tcap;
        size_t np = s->npieces, start = 0;
        s->npieces = 0;
        for (size_t i = 0; i < np; i++) {
            size_t a = start, b = start + s->pieces[i];
            start = b;
            switch (p->re[r].kind) {
            case RE_CUSTOM_GPT2: LLM_TRY(split_gpt2(s, a, b)); break;
            case RE_CUSTOM_LLAMA3: LLM_TRY(split_llama3(s, a, b)); break;
            default: LLM_TRY(split_pcre(&p->re[r], s, a, b, "tokenizer")); break;
            }
        }
    }
    /* the result is in s->next; hand it over as s->pieces */
    size_t *tmp = s->pieces, tcap = s->cap_pieces;
    s->pieces = s->next;
    s->cap_pieces = s->cap_next;
    s->next = tmp;
    s->cap_next = tcap;
    return LLM_OK;
}
