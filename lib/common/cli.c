/* cli.c: option tables -> getopt_long, help, completions list. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "io.h"

#ifndef LLM_VERSION
#define LLM_VERSION "0"
#endif
#ifndef LLM_COMMIT
#define LLM_COMMIT "unknown"
#endif

enum { OPT_LIST = 0x10000 };

static const struct llm_opt common[] = {
    { 'h', "help", LLM_ARG_NONE, NULL, "print this help and exit", NULL },
    { 'V', "version", LLM_ARG_NONE, NULL, "print the version and exit", NULL },
    { 'v', "verbose", LLM_ARG_NONE, NULL, "more messages on stderr (repeatable)", NULL },
    { 'q', "quiet", LLM_ARG_NONE, NULL, "fewer messages on stderr", NULL },
};
#define N_COMMON (int)(sizeof common / sizeof common[0])

int llm_cli_optind = 1;

static void on_signal(int sig)
{
    llm_out_abort_all_from_signal();
    signal(sig, SIG_DFL);
    raise(sig);
}

void llm_cli_init(struct llm_cli *c)
{
    (void)c;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGPIPE, on_signal);
}

static void opt_left(const struct llm_opt *o, char *buf, size_t n)
{
    char sh[8] = "    ";
    if (o->id > 0 && o->id < 256)
        snprintf(sh, sizeof sh, "-%c, ", o->id);
    if (o->arg == LLM_ARG_REQUIRED)
        snprintf(buf, n, "  %s--%s %s", sh, o->name, o->argname);
    else if (o->arg == LLM_ARG_OPTIONAL)
        snprintf(buf, n, "  %s--%s[=%s]", sh, o->name, o->argname);
    else
        snprintf(buf, n, "  %s--%s", sh, o->name);
}

static void print_opt(FILE *f, const struct llm_opt *o)
{
    char left[128];
    opt_left(o, left, sizeof left);
    if (strlen(left) < 30)
        fprintf(f, "%-30s %s\n", left, o->help);
    else
        fprintf(f, "%s\n%-30s %s\n", left, "", o->help);
}

void llm_cli_help(const struct llm_cli *c, FILE *f)
{
    const char *p = c->synopsis;
    int first = 1;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(f, "%s %s %.*s\n", first ? "Usage:" : "      ", c->prog, (int)n, p);
        first = 0;
        p += n + (nl ? 1 : 0);
    }
    fprintf(f, "%s\n\nOptions:\n", c->summary);
    for (int i = 0; i < c->n_opts; i++)
        print_opt(f, &c->opts[i]);
    for (int i = 0; i < N_COMMON; i++)
        print_opt(f, &common[i]);
    if (c->footer)
        fprintf(f, "\n%s", c->footer);
}

static void list_options(const struct llm_cli *c)
{
    for (int pass = 0; pass < 2; pass++) {
        const struct llm_opt *t = pass ? common : c->opts;
        int n = pass ? N_COMMON : c->n_opts;
        for (int i = 0; i < n; i++) {
            const struct llm_opt *o = &t[i];
            char sh[4] = "";
            if (o->id > 0 && o->id < 256)
                snprintf(sh, sizeof sh, "-%c", o->id);
            /* short<TAB>long<TAB>arg<TAB>completion<TAB>help */
            printf("%s\t--%s\t%s\t%s\t%s\n", sh, o->name,
                   o->arg == LLM_ARG_NONE ? "" : o->argname, o->complete ? o->complete : "",
                   o->help);
        }
    }
}

int llm_cli_usage(const struct llm_cli *c, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", c->prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", c->prog);
    return 2;
}

int llm_cli_fail(const struct llm_cli *c, llm_status s)
{
    fprintf(stderr, "%s: %s\n", c->prog, llm_error_detail(s));
    return 1;
}

int llm_cli_exit(const struct llm_cli *c, int code)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        /* a failure already said what was wrong in its one line (often this
         * very write error): a second line would break the rule */
        if (!code)
            fprintf(stderr, "%s: error writing to standard output: %s\n", c->prog,
                    strerror(errno));
        return code ? code : 1;
    }
    return code;
}

int llm_cli_next(struct llm_cli *c, int argc, char **argv, const char **arg)
{
    static struct option lopts[128];
    static char shorts[256];
    static int built;
    if (!built) {
        int k = 0, s = 0;
        shorts[s++] = ':'; /* report a missing argument as ':' */
        for (int pass = 0; pass < 2; pass++) {
            const struct llm_opt *t = pass ? common : c->opts;
            int n = pass ? N_COMMON : c->n_opts;
            for (int i = 0; i < n && k < 126; i++) {
                lopts[k].name = t[i].name;
                lopts[k].has_arg = t[i].arg == LLM_ARG_NONE       ? no_argument
                                   : t[i].arg == LLM_ARG_REQUIRED ? required_argument
                                                                  : optional_argument;
                lopts[k].flag = NULL;
                lopts[k].val = t[i].id;
                k++;
                if (t[i].id > 0 && t[i].id < 256 && s < 250) {
                    shorts[s++] = (char)t[i].id;
                    if (t[i].arg == LLM_ARG_REQUIRED)
                        shorts[s++] = ':';
                    else if (t[i].arg == LLM_ARG_OPTIONAL) {
                        shorts[s++] = ':';
                        shorts[s++] = ':';
                    }
                }
            }
        }
        lopts[k++] = (struct option){ "list-options", no_argument, NULL, OPT_LIST };
        lopts[k] = (struct option){ 0 };
        shorts[s] = 0;
        built = 1;
        opterr = 0;
    }
    for (;;) {
        int prev = optind;
        int r = getopt_long(argc, argv, shorts, lopts, NULL);
        llm_cli_optind = optind;
        *arg = optarg;
        switch (r) {
        case -1:
            return LLM_CLI_END;
        case 'h':
            llm_cli_help(c, stdout);
            return LLM_CLI_EXIT0;
        case 'V':
            printf("%s %s (commit %s)\n", c->prog, LLM_VERSION, LLM_COMMIT);
            return LLM_CLI_EXIT0;
        case 'v':
            c->verbose++;
            continue;
        case 'q':
            c->verbose--;
            continue;
        case OPT_LIST:
            list_options(c);
            return LLM_CLI_EXIT0;
        case ':':
            llm_cli_usage(c, "option '%s' needs an argument", argv[prev < argc ? prev : argc - 1]);
            return LLM_CLI_ERROR;
        case '?':
            if (optopt > 0 && optopt < 256)
                llm_cli_usage(c, "unknown option '-%c'", optopt);
            else
                llm_cli_usage(c, "unknown option '%s'", argv[prev < argc ? prev : argc - 1]);
            return LLM_CLI_ERROR;
        default:
            return r;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* numbers */

llm_status llm_parse_i64(const char *s, int64_t min, int64_t max, const char *what, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (!*s || *end || errno)
        return llm_error_set(LLM_E_INVALID, "%s: '%s' is not an integer", what, s);
    if (v < min || v > max)
        return llm_error_set(LLM_E_INVALID, "%s: %lld is out of range %lld..%lld", what, v,
                             (long long)min, (long long)max);
    *out = v;
    return LLM_OK;
}

llm_status llm_parse_f64(const char *s, double min, double max, const char *what, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || isnan(v))
        return llm_error_set(LLM_E_INVALID, "%s: '%s' is not a number", what, s);
    if (v < min || v > max)
        return llm_error_set(LLM_E_INVALID, "%s: %g is out of range %g..%g", what, v, min, max);
    *out = v;
    return LLM_OK;
}

llm_status llm_parse_size(const char *s, const char *what, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    }
    if (*end == 'i' && mul > 1)
        end++;
    if ((*end == 'B' || *end == 'b') && end[1] == 0)
        end++;
    if (!*s || *end || errno || !(v >= 0) || v * mul > 1.8e19)
        return llm_error_set(LLM_E_INVALID, "%s: '%s' is not a size (e.g. 512M, 80G)", what, s);
    *out = (uint64_t)(v * mul);
    return LLM_OK;
}
