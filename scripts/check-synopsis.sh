#!/bin/sh
# check-synopsis.sh BIN MANPAGE: does the man page say what the binary does?
#
#   1. The SYNOPSIS lines of MANPAGE must be exactly the Usage lines of
#      `BIN --help` ("Usage: prog ..." then lines indented "       prog ...").
#   2. Every long option that `BIN --list-options` reports must appear in the
#      OPTIONS section of MANPAGE.
#
# Prints both synopsis lists, then what differs. Exit status: 0 when both
# checks pass, 1 when they do not, 2 on a usage error (bad arguments, a
# binary that does not run, a page without SYNOPSIS).
#
# The man page is read as roff source written with man(7) macros. In the
# SYNOPSIS each line starts with a ".B prog" (or ".SY prog") request and
# continues with text lines; .br/.PP/.sp/.YS or the next .B/.SY end it.
# Font escapes are dropped and \- becomes -, so "\fB\-\-info\fR" and
# "--info" compare equal.
set -eu
LC_ALL=C
export LC_ALL

me='check-synopsis.sh'
if [ $# -ne 2 ]; then
    echo "usage: $me BIN MANPAGE" >&2
    exit 2
fi
bin=$1
page=$2
if [ ! -x "$bin" ]; then
    echo "$me: $bin: not an executable (run make first)" >&2
    exit 2
fi
if [ ! -r "$page" ]; then
    echo "$me: $page: cannot read" >&2
    exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-synopsis.XXXXXX")
trap 'rm -rf "$tmp"' EXIT HUP INT TERM

if ! "$bin" --help >"$tmp/help" 2>"$tmp/help.err"; then
    echo "$me: '$bin --help' failed:" >&2
    cat "$tmp/help.err" >&2
    exit 2
fi

# Usage lines: the first line starts "Usage: ", the next ones are indented by
# seven spaces (the width of "Usage: ") and hold the program name again.
awk '
    NR == 1 { if (sub(/^Usage: /, "") == 0) exit; print; next }
    /^       [^ ]/ { sub(/^ +/, ""); print; next }
    { exit }
' "$tmp/help" | sed 's/[[:space:]][[:space:]]*/ /g; s/ $//' >"$tmp/from-help"

# roff source -> plain text of the SYNOPSIS lines.
awk '
    function plain(s) {
        gsub(/\\f\[[^]]*\]/, "", s)      # \f[B]
        gsub(/\\f\([A-Za-z][A-Za-z]/, "", s) # \f(CW
        gsub(/\\f[A-Za-z1-4]/, "", s)     # \fB \fI \fR \fP
        gsub(/\\&/, "", s)
        gsub(/\\-/, "-", s)
        gsub(/\\ /, " ", s)
        gsub(/\\e/, "\\", s)
        gsub(/\\\(em/, "--", s)
        gsub(/\\\(en/, "-", s)
        return s
    }
    # Arguments of a request: words, or "quoted strings" with "" for a quote.
    function args(s,    out, n, i, c, q, w) {
        n = 0; w = ""; q = 0; out = ""
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (q) {
                if (c == "\"") {
                    if (substr(s, i + 1, 1) == "\"") { w = w "\""; i++ } else q = 0
                } else w = w c
            } else if (c == "\"") {
                q = 1
            } else if (c == " " || c == "\t") {
                if (w != "") { A[++n] = w; w = "" }
            } else w = w c
        }
        if (w != "" || q) A[++n] = w
        return n
    }
    function flush() { if (cur != "") print cur; cur = "" }
    function add(t) { if (t == "") return; cur = (cur == "" ? t : cur " " t) }
    /^\.SH/ {
        if (insyn) { flush(); exit }
        s = $0; sub(/^\.SH[ \t]*/, "", s); gsub(/"/, "", s)
        if (toupper(s) == "SYNOPSIS") insyn = 1
        next
    }
    !insyn { next }
    /^\.\\"/ || /^'"'"'\\"/ { next }                # comments
    /^\.(B|SY)([ \t]|$)/ {                          # start of a synopsis line
        flush(); s = $0; sub(/^\.(B|SY)[ \t]*/, "", s)
        n = args(s); t = ""
        for (i = 1; i <= n; i++) t = t (i > 1 ? " " : "") A[i]
        cur = plain(t); started = 1; next
    }
    /^\.(br|PP|LP|P|sp|YS|OP)([ \t]|$)/ { flush(); next }
    /^\.(BR|RB|IR|RI|BI|IB)([ \t]|$)/ {             # alternating fonts: no spaces
        s = $0; sub(/^\.[A-Z][A-Z][ \t]*/, "", s)
        n = args(s); t = ""
        for (i = 1; i <= n; i++) t = t A[i]
        add(plain(t)); next
    }
    /^\.(I|SM|SB)([ \t]|$)/ {
        s = $0; sub(/^\.[A-Z]+[ \t]*/, "", s)
        n = args(s); t = ""
        for (i = 1; i <= n; i++) t = t (i > 1 ? " " : "") A[i]
        add(plain(t)); next
    }
    /^\./ { next }                                   # other requests: ignore
    { add(plain($0)) }
    END { flush() }
' "$page" | sed 's/[[:space:]][[:space:]]*/ /g; s/^ //; s/ $//' >"$tmp/from-man"

echo "$bin --help:"
sed 's/^/    /' "$tmp/from-help"
echo "$page SYNOPSIS:"
sed 's/^/    /' "$tmp/from-man"

status=0
if [ ! -s "$tmp/from-help" ]; then
    echo "$me: $bin --help has no 'Usage:' line" >&2
    exit 2
fi
if [ ! -s "$tmp/from-man" ]; then
    echo "$me: $page: no SYNOPSIS lines found (.SH SYNOPSIS, then .B prog lines)" >&2
    exit 2
fi
if cmp -s "$tmp/from-help" "$tmp/from-man"; then
    echo "synopsis: same"
else
    echo "synopsis: DIFFERENT (- --help, + man page):"
    diff -u "$tmp/from-help" "$tmp/from-man" | sed '1,2d' || true
    status=1
fi

# Every long option of the table must be documented under OPTIONS.
if "$bin" --list-options >"$tmp/opts" 2>/dev/null; then
    awk '
        /^\.SH/ { s = $0; sub(/^\.SH[ \t]*/, "", s); gsub(/"/, "", s); inopt = (toupper(s) == "OPTIONS"); next }
        inopt { gsub(/\\-/, "-"); gsub(/\\f(\[[^]]*\]|\([A-Za-z][A-Za-z]|[A-Za-z1-4])/, ""); print }
    ' "$page" >"$tmp/options-text"
    missing=
    cut -f2 "$tmp/opts" >"$tmp/longs"
    while read -r long; do
        if ! grep -q -e "${long}\$" -e "${long}[^a-zA-Z0-9-]" "$tmp/options-text"; then
            missing="$missing $long"
        fi
    done <"$tmp/longs"
    if [ -n "$missing" ]; then
        echo "options: not documented under OPTIONS:$missing"
        status=1
    else
        echo "options: all $(wc -l <"$tmp/opts" | tr -d ' ') documented"
    fi
else
    echo "$me: '$bin --list-options' failed; options not checked" >&2
    status=1
fi
exit $status
