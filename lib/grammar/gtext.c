/* gtext.c: growable text for the converters to GBNF (regex.c, schema.c). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "gram_impl.h"

void llm_gtext_put(struct gtext *t, const char *s, size_t n)
{
    if (t->err)
        return;
    void *p = t->s;
    if (llm_grow(&p, &t->cap, t->len + n + 1, 1)) {
        t->err = 1;
        return;
    }
    t->s = p;
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
}

void llm_gtext_printf(struct gtext *t, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) {
        t->err = 1;
        return;
    }
    llm_gtext_put(t, buf, (size_t)n);
}

void llm_gtext_cp(struct gtext *t, uint32_t c, int in_class)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= 0x20 && c < 0x7F && !strchr(in_class ? "\\]^-[\"" : "\\\"", (int)c)))
        llm_gtext_printf(t, "%c", (char)c);
    else if (c < 0x100)
        llm_gtext_printf(t, "\\x%02X", c);
    else if (c < 0x10000)
        llm_gtext_printf(t, "\\u%04X", c);
    else
        llm_gtext_printf(t, "\\U%08X", c);
}
