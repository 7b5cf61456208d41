#!/bin/bash
# CLI tests: the binaries' output and exit codes, on real data where present.
# Cases live in tests/cli/<tool>.sh, one function t_* each; a case passes
# when it returns 0, is skipped when it calls `skip REASON`, and fails
# otherwise (with its output shown).
# Run from the repository root: LLM_BIN=bin tests/cli/run.sh [PATTERN]
set -u
BIN=${LLM_BIN:-$PWD/bin}
DATA=${LLM_DATA:-$PWD/../shared/data}
MODELS=${LLM_MODELS:-$PWD/models}
ROOT=$PWD
TMP=$(mktemp -d "${TMPDIR:-/tmp}/llm-cli-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0 skipped=0

skip() { echo "$*" >"$TMP/.skip"; exit 77; }
need() { for f in "$@"; do [ -e "$f" ] || skip "absent: $f"; done; }
# expect CODE CMD...: run, keep stdout/stderr in $TMP/out and $TMP/err, check the exit code
expect() {
    local want=$1; shift
    "$@" >"$TMP/out" 2>"$TMP/err"
    local got=$?
    if [ "$got" != "$want" ]; then
        echo "exit $got, expected $want: $*"; echo "stderr:"; head -5 "$TMP/err"; return 1
    fi
}
has() { grep -qF -- "$2" "$1" || { echo "'$2' not in $1:"; head -5 "$1"; return 1; }; }
# tensor lines (name, type, shape, xxh3) of --info --checksums, for comparisons
tensors() {
    "$CONVERT" --info --checksums "$1" | grep '^  - {name:' | grep -v 'aux: true' |
        sed -E 's/, stored: [0-9]+, compression: [a-z]+//' | sort
}
# metadata and tensor lines of --info, in sorted order, without the file name
infosorted() { "$CONVERT" --info --checksums "$1" | grep -v -e '^file:' -e 'gguf_file_type:' | sort; }

# one line on stderr (the rule for every failure)
one_line() { [ "$(wc -l <"$TMP/err")" = 1 ] || { echo "stderr has $(wc -l <"$TMP/err") lines:"; cat "$TMP/err"; return 1; }; }

# ---- damaged inputs, shared by the tools' cases ------------------------------
# $TMP/bad.llm: stories260K with one byte flipped in the weights of
# blk.1.ffn_up.weight (its checksum no longer matches)
bad_llm() {
    need "$DATA/gguf/stories260K.gguf"
    [ -e "$TMP/bad.llm" ] && return 0
    "$BIN/llm-convert" "$DATA/gguf/stories260K.gguf" -o "$TMP/good.llm" || return 1
    cp "$TMP/good.llm" "$TMP/bad.llm"
    printf '\x55' | dd of="$TMP/bad.llm" bs=1 seek=600000 conv=notrunc status=none
}
BAD_MSG="bad.llm: tensor 'blk.1.ffn_up.weight': checksum mismatch"
# $TMP/nan.llm: stories260K with a NaN at element 100 of token_embd.weight
# (row 1, BOS), stored with a good checksum
nan_llm() {
    need "$DATA/llama2c/stories260K.bin" "$DATA/llama2c/tok512.bin"
    [ -e "$TMP/nan.llm" ] && return 0
    cp "$DATA/llama2c/stories260K.bin" "$TMP/nan.bin" && chmod u+w "$TMP/nan.bin"
    printf '\x00\x00\xc0\x7f' | dd of="$TMP/nan.bin" bs=1 seek=$((28 + 4 * 100)) conv=notrunc status=none
    "$BIN/llm-convert" -q "$TMP/nan.bin" --tokenizer "$DATA/llama2c/tok512.bin" -o "$TMP/nan.llm"
}
NAN_MSG="nan.llm: tensor 'token_embd.weight': 1 NaN or infinite value (the first at element 100)"
# run a command with files limited to 64 MB, so that a reader that copies an
# endless device to TMPDIR is stopped (SIGXFSZ) instead of filling the disk
limited() { (ulimit -f 131072; "$@"); }

# ---- runner ----------------------------------------------------------------
for f in "$ROOT"/tests/cli/llm-*.sh; do
    # shellcheck disable=SC1090
    . "$f"
done
for t in $(declare -F | awk '{print $3}' | grep '^t_' | grep -- "${1:-}"); do
    rm -f "$TMP/.skip"
    out=$( ("$t") 2>&1)
    rc=$?
    if [ $rc = 0 ]; then
        pass=$((pass + 1))
    elif [ $rc = 77 ]; then
        skipped=$((skipped + 1)); echo "SKIP ${t#t_}: $(cat "$TMP/.skip" 2>/dev/null)"
    else
        fail=$((fail + 1)); echo "FAIL ${t#t_}"; printf '%s\n' "$out" | sed 's/^/    /' | head -20
    fi
done
echo "cli: $pass passed, $fail failed, $skipped skipped"
[ $fail = 0 ]
