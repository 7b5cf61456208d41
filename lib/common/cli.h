/* cli.h: one option table per tool gives the parsing (getopt_long), the
 * --help text and, through the hidden --list-options, the shell completions.
 *
 * Every tool also gets -h/--help (stdout, exit 0), -V/--version,
 * -v/--verbose and -q/--quiet. Bad usage prints one line and a hint on
 * stderr; the tool then exits 2.
 */
#ifndef LLM_COMMON_CLI_H
#define LLM_COMMON_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "status.h"

enum llm_arg { LLM_ARG_NONE, LLM_ARG_REQUIRED, LLM_ARG_OPTIONAL };

struct llm_opt {
    int id;               /* the short option character, or a value >= 256 */
    const char *name;     /* long name, kebab-case */
    enum llm_arg arg;
    const char *argname;  /* "TYPE", shown in help */
    const char *help;     /* one line; defaults are written "(default: x)" */
    const char *complete; /* completion: "file", "dir", or space-separated words */
};

struct llm_cli {
    const char *prog;      /* "llm-convert" */
    const char *synopsis;  /* usage lines without the program name, '\n'-separated */
    const char *summary;   /* one line */
    const struct llm_opt *opts;
    int n_opts;
    const char *footer;    /* printed after the options (examples), or NULL */
    int verbose;           /* counted -v minus -q */
};

enum { LLM_CLI_END = -1, LLM_CLI_ERROR = -2, LLM_CLI_EXIT0 = -3 };

/* Program name for messages; signal handlers that remove temporary files. */
void llm_cli_init(struct llm_cli *c);

/* Next option: its id (with *arg set), LLM_CLI_END when the options end
 * (optind is then the first operand), LLM_CLI_ERROR after printing a usage
 * error, or LLM_CLI_EXIT0 after --help/--version/--list-options. */
int llm_cli_next(struct llm_cli *c, int argc, char **argv, const char **arg);
extern int llm_cli_optind;

/* Print "prog: message" and "Try 'prog --help'." to stderr; returns 2. */
int llm_cli_usage(const struct llm_cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "prog: <detail of s>" to stderr; returns 1. */
int llm_cli_fail(const struct llm_cli *c, llm_status s);
/* Flush stdout; 1 (with a message) on a write error, else `code`. */
int llm_cli_exit(const struct llm_cli *c, int code);
void llm_cli_help(const struct llm_cli *c, FILE *f);

/* Number parsing with an end check, a range check and K/M/G suffixes for
 * sizes. On failure: a detail naming `what`, LLM_E_INVALID. */
llm_status llm_parse_i64(const char *s, int64_t min, int64_t max, const char *what, int64_t *out);
llm_status llm_parse_f64(const char *s, double min, double max, const char *what, double *out);
llm_status llm_parse_size(const char *s, const char *what, uint64_t *out);

#endif
