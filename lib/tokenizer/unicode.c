/* unicode.c: code points and their categories, as llama.cpp's unicode.cpp
 * sees them (formats.md §2.5), with the categories taken from utf8proc.
 *
 * llama.cpp decodes UTF-8 leniently (overlong forms and surrogates pass) and
 * turns each invalid byte into U+FFFD; we decode the same way, so that the
 * categories that drive the pre-tokenizer agree, but callers keep the
 * original bytes so that invalid input survives a round trip. */
#include <pthread.h>
#include <utf8proc.h>

#include "tok_impl.h"

/* White_Space code points (llama.cpp's unicode_set_whitespace). */
static int is_space(uint32_t cp)
{
    switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

static uint16_t category_flag(utf8proc_category_t c)
{
    switch (c) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return TOK_CPT_LETTER;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return TOK_CPT_MARK;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return TOK_CPT_NUMBER;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        return TOK_CPT_PUNCT;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        return TOK_CPT_SYMBOL;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        return TOK_CPT_SEPARATOR;
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
        return TOK_CPT_CONTROL;
    default:
        return TOK_CPT_UNDEFINED;
    }
}

static uint16_t ascii_flags[128];
static pthread_once_t ascii_once = PTHREAD_ONCE_INIT;

static uint16_t slow_flags(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return TOK_CPT_UNDEFINED;
    uint16_t f = category_flag(utf8proc_category((utf8proc_int32_t)cp));
    if (is_space(cp))
        f |= TOK_CPT_WHITESPACE;
    return f;
}

static void init_ascii(void)
{
    for (uint32_t c = 0; c < 128; c++)
        ascii_flags[c] = slow_flags(c);
}

uint16_t llm_tok_cpt_flags(uint32_t cp)
{
    if (cp < 128) {
        pthread_once(&ascii_once, init_ascii);
        return ascii_flags[cp];
    }
    return slow_flags(cp);
}

size_t llm_tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len = (b & 0x40) == 0 ? 0 : (b & 0x20) == 0 ? 2 : (b & 0x10) == 0 ? 3 : (b & 0x08) == 0 ? 4 : 0;
    if (len == 0 || len > n)
        goto bad;
    uint32_t v = b & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            goto bad;
        v = (v << 6) | (s[i] & 0x3f);
    }
    *cp = v;
    return len;
bad:
    *cp = 0xFFFD;
    return 1;
}

size_t llm_tok_utf8_encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xc0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xe0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (uint8_t)(0xf0 | ((cp >> 18) & 0x07));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

/* ---- GPT-2 bytes_to_unicode (formats.md §2.8) ---------------------------- */

static struct llm_tok_bytemap bytemap;
static int16_t cpt_to_byte[0x144];
static pthread_once_t bytemap_once = PTHREAD_ONCE_INIT;

static int byte_is_direct(int b)
{
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

static void init_bytemap(void)
{
    for (int i = 0; i < 0x144; i++)
        cpt_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_is_direct(b) ? (uint32_t)b : 256u + (uint32_t)extra++;
        uint8_t tmp[4];
        size_t n = llm_tok_utf8_encode(cp, tmp);
        bytemap.enc[b][0] = tmp[0];
        bytemap.enc[b][1] = n > 1 ? tmp[1] : 0;
        bytemap.enc_len[b] = (uint8_t)n;
        cpt_to_byte[cp] = (int16_t)b;
    }
}

const struct llm_tok_bytemap *llm_tok_bytemap(void)
{
    pthread_once(&bytemap_once, init_bytemap);
    return &bytemap;
}

int llm_tok_byte_of_cpt(uint32_t cp)
{
    pthread_once(&bytemap_once, init_bytemap);
    return cp < 0x144 ? cpt_to_byte[cp] : -1;
}
