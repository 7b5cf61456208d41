#!/bin/sh
# bench-llama-cpp.sh: llm-bench against llama.cpp's llama-bench on the same
# models, in the same run: ROUNDS rounds that alternate the two programs
# (each -r 3), then the median tokens/s of each and their ratio, for every
# model and test (ours per round: llm-bench's median of 3; llama.cpp's: the
# mean llama-bench reports). The README's "llm-run speed against
# llama.cpp" table was measured this way.
#
#   LLAMA_BENCH=/path/llama-bench scripts/bench-llama-cpp.sh [DIR]
#
# DIR (default build/bench-llama-cpp) receives the models: stories110m-
# shaped synthetic f32, q8_0 and q4_0 (.llm, exported to GGUF for
# llama.cpp), and SmolLM2-135M-Instruct Q4_1 when models/ has its GGUF
# (scripts/fetch-model.sh). Environment: THREADS (2), ROUNDS (5),
# TESTS ("-p 128" "-p 512" "-n 64" by default, one per line).
set -eu
lb=${LLAMA_BENCH:?set LLAMA_BENCH to the path of llama-bench}
[ -x "$lb" ] || { echo "bench-llama-cpp: $lb is not an executable" >&2; exit 1; }
dir=${1:-build/bench-llama-cpp}
threads=${THREADS:-2}
rounds=${ROUNDS:-5}
tests=${TESTS:-"-p 128
-p 512
-n 64"}
make --no-print-directory bin/llm-bench bin/llm-convert >/dev/null
. scripts/bench-models.sh
bench_models "$dir" "f32 q8_0 q4_0"
out=$dir/runs.txt
: >"$out"
echo "$tests" | while read -r test; do
    [ -n "$test" ] || continue
    case $test in
    -n*) ours="-p 1 $test" theirs="-p 0 $test" col=tg ;;
    *) ours="$test -n 1" theirs="$test -n 0" col=pp ;;
    esac
    r=0
    while [ $r -lt "$rounds" ]; do
        r=$((r + 1))
        for m in $models; do
            if [ "$m" = smol ]; then g=$smol l=$dir/smollm2.llm name=smollm2-q4_1
            else g=$m.gguf l=$m.llm name=$(basename "$m"); fi
            # shellcheck disable=SC2086
            v=$(peer_tps "$g" $theirs)
            [ -n "$v" ] || { echo "bench-llama-cpp: llama-bench gave no figure for $g $theirs" >&2; exit 1; }
            echo "$name $test llama.cpp $v" >>"$out"
            # shellcheck disable=SC2086
            v=$(ours_tps "$l" "$col" $ours)
            [ -n "$v" ] || { echo "bench-llama-cpp: llm-bench gave no figure for $l $ours" >&2; exit 1; }
            echo "$name $test llm-tools $v" >>"$out"
        done
    done
done
# median per (model, test, program), then the ratio
sort -k1,1 -k2,3 -k4,4 -k5n "$out" | awk '
    { k = $1 " " $2 " " $3 " " $4; v[k, ++n[k]] = $5 }
    END {
        for (k in n) { m = v[k, int((n[k] + 1) / 2)]; med[k] = m }
        for (k in med) {
            split(k, p, " ")
            if (p[4] != "llm-tools") continue
            t = p[1] " " p[2] " " p[3] " llama.cpp"
            ratio = med[t] > 0 ? med[k] / med[t] : 0
            printf "%-14s %-8s llm-tools %8.1f  llama.cpp %8.1f  ratio %.2f\n", p[1], p[2] " " p[3],
                med[k], med[t], ratio
        }
    }' | sort
