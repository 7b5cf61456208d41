#!/bin/sh
# bench-batched.sh: llm-bench -b against llama.cpp's llama-batched-bench on
# the same models, in the same run: ROUNDS rounds that alternate the two
# programs, then per model and batch size B the median prompt, decode and
# overall tokens/s of each and their ratios. The README's "Batched decode"
# table was measured this way.
#
#   LLAMA_BATCHED_BENCH=/path/llama-batched-bench scripts/bench-batched.sh [DIR]
#
# DIR (default build/bench-llama-cpp, shared with bench-llama-cpp.sh)
# receives the models: a stories110m-shaped synthetic q4_0 (.llm, exported
# to GGUF for llama.cpp), and SmolLM2-135M-Instruct Q4_1 when models/ has
# its GGUF (scripts/fetch-model.sh). Environment: THREADS (2), ROUNDS (5),
# NPL (1,4,16,32), NPP (128), NTG (64), TYPES (q4_0; empty for none); PAIRS, a list of
# NAME=GGUF,LLM, adds models of your own (for instance the GGUF that
# llama.cpp's llama-quantize made and its llm-convert output).
set -eu
lb=${LLAMA_BATCHED_BENCH:?set LLAMA_BATCHED_BENCH to the path of llama-batched-bench}
[ -x "$lb" ] || { echo "bench-batched: $lb is not an executable" >&2; exit 1; }
dir=${1:-build/bench-llama-cpp}
threads=${THREADS:-2}
rounds=${ROUNDS:-5}
npl=${NPL:-1,4,16,32}
npp=${NPP:-128}
ntg=${NTG:-64}
types=${TYPES-q4_0}
make --no-print-directory bin/llm-bench bin/llm-convert >/dev/null
. scripts/bench-models.sh
bench_models "$dir" "$types"
for p in ${PAIRS:-}; do
    models="$models $p"
done
# llama-batched-bench needs a context that holds every sequence
maxb=$(echo "$npl" | tr ',' '\n' | sort -n | tail -1)
ctx=$((maxb * (npp + ntg) + 64))
out=$dir/batched-runs.txt
: >"$out"
r=0
while [ $r -lt "$rounds" ]; do
    r=$((r + 1))
    for m in $models; do
        case $m in
        smol) g=$smol l=$dir/smollm2.llm name=smollm2-q4_1 ;;
        *=*,*) name=${m%%=*} g=${m#*=} l=${g#*,} g=${g%%,*} ;;
        *) g=$m.gguf l=$m.llm name=$(basename "$m") ;;
        esac
        # one jsonl object per B: "pl", "speed_pp", "speed_tg", "speed"
        "$lb" -m "$g" -c "$ctx" -b 2048 -ub 512 -npp "$npp" -ntg "$ntg" -npl "$npl" \
            -t "$threads" --output-format jsonl 2>/dev/null |
            awk -v n="$name" '
                function f(k,   s) { s = $0; sub(".*\"" k "\": *", "", s); sub("[,}].*", "", s); return s }
                /"pl"/ { print n, f("pl"), "llama.cpp", f("speed_pp"), f("speed_tg"), f("speed") }' >>"$out"
        bin/llm-bench -m "$l" -b "$npl" -p "$npp" -n "$ntg" -t "$threads" -r 1 -o csv 2>/dev/null |
            awk -F, -v n="$name" 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
                { print n, $(h["n_seq"]), "llm-tools", $(h["s_pp_ts"]), $(h["s_tg_ts"]), $(h["s_ts"]) }' >>"$out"
    done
done
grep -q llama.cpp "$out" || { echo "bench-batched: llama-batched-bench gave no figures" >&2; exit 1; }
grep -q llm-tools "$out" || { echo "bench-batched: llm-bench gave no figures" >&2; exit 1; }
# medians per (model, B, program) of each column, then ours over theirs
awk '
    function med(k, c,   n, i, j, t, a) {
        n = cnt[k]
        for (i = 1; i <= n; i++) a[i] = v[k, c, i]
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return a[int((n + 1) / 2)]
    }
    { k = $1 " " $2 " " $3; i = ++cnt[k]; for (c = 4; c <= 6; c++) v[k, c, i] = $c + 0; keys[$1 " " $2] = 1 }
    END {
        printf "%-14s %3s  %-27s %-27s %-27s\n", "model", "B", "S_PP ours/llama.cpp", "S_TG ours/llama.cpp", "S ours/llama.cpp"
        for (k in keys) {
            o = k " llm-tools"; t = k " llama.cpp"
            split(k, p, " ")
            line = sprintf("%-14s %3d ", p[1], p[2])
            for (c = 4; c <= 6; c++) {
                a = med(o, c); b = med(t, c)
                line = line sprintf(" %7.1f/%7.1f (%4.2fx)     ", a, b, b > 0 ? a / b : 0)
            }
            print line
        }
    }' "$out" | sort -k1,1 -k2n
