#!/bin/sh
# bench-kquants.sh: prefill and decode speed of GGUF files of the K-quant
# and IQ4 types, ours (the GGUF read directly: its tensors are kept as they
# are) against llama.cpp's llama-bench on the same file, in alternating
# rounds (each -r 3); medians of the rounds per file and test, and our
# ratio. The closing note's K-quant speed table was measured this way.
#
#   LLAMA_BENCH=/path/llama-bench scripts/bench-kquants.sh FILE.gguf...
#
# Environment: THREADS (2), ROUNDS (3), TESTS ("-p 128" and "-n 64").
set -eu
lb=${LLAMA_BENCH:?set LLAMA_BENCH to llama.cpp\'s llama-bench}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
tests=${TESTS:-"-p 128
-n 64"}
make --no-print-directory bin/llm-bench >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
printf '| file | test | llama.cpp t/s | ours t/s | ours / llama.cpp |\n|---|---|---:|---:|---:|\n'
for f in "$@"; do
    n=$(basename "$f" .gguf)
    echo "$tests" | while IFS= read -r t; do
        [ -n "$t" ] || continue
        k=$(echo "$t" | tr -d ' -')
        r=0
        while [ $r -lt "$rounds" ]; do
            # llama-bench runs its default -p 512 and -n 128 too unless told 0
            case $t in -p*) lt="$t -n 0" ;; *) lt="-p 0 $t" ;; esac
            # shellcheck disable=SC2086
            "$lb" -m "$f" $lt -t "$threads" -r 3 -o csv 2>/dev/null | tail -1 |
                awk -F, '{ gsub(/"/, "", $0); print $(NF - 1) }' >>"$tmp/$n-$k-lc"
            # shellcheck disable=SC2086
            bin/llm-bench -m "$f" $t -t "$threads" -r 3 -o csv 2>/dev/null | tail -1 |
                awk -F, '{ print $24 }' >>"$tmp/$n-$k-ours"
            r=$((r + 1))
        done
        a=$(median <"$tmp/$n-$k-lc")
        b=$(median <"$tmp/$n-$k-ours")
        printf '| %s | %s | %.1f | %.1f | %.2fx |\n' "$n" "$k" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print b / a }')"
    done
done
