#!/bin/sh
# bench-spec-llama.sh: speculative decoding against llama.cpp on the same
# GGUF files, in the same run. The README's speculation table was measured
# this way.
#
#   LLAMA=/path/llama.cpp/build/bin scripts/bench-spec-llama.sh TARGET.gguf DRAFT.gguf|lookup PROMPTS
#
# ROUNDS rounds (default 3) alternate the programs. Each round:
#  - llm-bench -m TARGET --draft DRAFT (or --lookup) --prompts PROMPTS --chat
#    -n 128 -r 1: plain and speculating tokens/s over the prompts;
#  - for each prompt in SmolLM2's chat template (llama.cpp applies no
#    template to -p), llama-cli plain decode and llama-speculative (or
#    llama-lookup) at --draft-max DRAFT_MAX (default 4), greedy, 128
#    tokens: generated tokens summed over the prompts / their time summed.
# Prints one line per round and program, then the medians and speedups.
# Environment: LLAMA (required), THREADS (2), ROUNDS (3), DRAFT_MAX (4), N (128).
set -eu
[ $# -eq 3 ] || { echo "usage: LLAMA=DIR $0 TARGET.gguf DRAFT.gguf|lookup PROMPTS" >&2; exit 2; }
target=$1 draft=$2 prompts=$3
lb=${LLAMA:?set LLAMA to llama.cpp build/bin}
threads=${THREADS:-2} rounds=${ROUNDS:-3} dmax=${DRAFT_MAX:-4} n=${N:-128}
for f in "$target" "$prompts"; do [ -r "$f" ] || { echo "bench-spec-llama: cannot read $f" >&2; exit 1; }; done
[ "$draft" = lookup ] || [ -r "$draft" ] || { echo "bench-spec-llama: cannot read $draft" >&2; exit 1; }
if [ "$draft" = lookup ]; then spec=llama-lookup; else spec=llama-speculative; fi
for b in llama-cli $spec; do
    [ -x "$lb/$b" ] || { echo "bench-spec-llama: $lb/$b is not an executable" >&2; exit 1; }
done
make --no-print-directory bin/llm-bench >/dev/null
if [ "$draft" = lookup ]; then ours="--lookup"; else ours="--draft $draft"; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sys="You are a helpful AI assistant named SmolLM, trained by Hugging Face"
r=0
while [ $r -lt "$rounds" ]; do
    r=$((r + 1))
    # ours: "| model | draft | threads | prompts | tokens | plain t/s | spec t/s | speedup | ..."
    # shellcheck disable=SC2086
    bin/llm-bench -m "$target" $ours --prompts "$prompts" --chat -n "$n" -t "$threads" -r 1 2>/dev/null |
        awk -F'|' -v r=$r '/^\| / && $7 + 0 > 0 { gsub(/ /, "", $7); split($8, s, " ");
            printf "round %d llm-tools plain %.2f spec %.2f accept %s\n", r, $7, s[1], $10 }'
    pt=0 pn=0 st=0 sn=0 acc='' ms='' runs='' tok='' sec=''
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        p=$(printf '<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%b<|im_end|>\n<|im_start|>assistant\n' "$sys" "$line")
        "$lb/llama-cli" -m "$target" -no-cnv -p "$p" -n "$n" --temp 0 -t "$threads" >"$tmp/plain" 2>&1 </dev/null
        # "eval time =   914.11 ms /   129 runs"
        read -r ms runs <<EOF
$(awk '/ eval time/ && !/prompt/ { for (i = 1; i <= NF; i++) if ($i == "ms") { print $(i - 1), $(i + 2); exit } }' "$tmp/plain")
EOF
        [ -n "${runs:-}" ] || { echo "bench-spec-llama: llama-cli gave no timing:" >&2; tail -3 "$tmp/plain" >&2; exit 1; }
        pt=$(awk -v a="$pt" -v b="$ms" 'BEGIN { print a + b }') pn=$((pn + runs))
        if [ "$draft" = lookup ]; then
            "$lb/llama-lookup" -m "$target" -p "$p" -n "$n" --temp 0 -t "$threads" --draft-max "$dmax" >"$tmp/spec" 2>&1 </dev/null
        else
            "$lb/llama-speculative" -m "$target" -md "$draft" -p "$p" -n "$n" --temp 0 -t "$threads" \
                -td "$threads" --draft-max "$dmax" >"$tmp/spec" 2>&1 </dev/null
        fi
        # "decoded  131 tokens in    2.754 seconds"
        read -r tok sec <<EOF
$(awk '/^decoded/ { print $2, $5; exit }' "$tmp/spec")
EOF
        [ -n "${sec:-}" ] || { echo "bench-spec-llama: llama.cpp's speculation gave no timing:" >&2; tail -3 "$tmp/spec" >&2; exit 1; }
        sn=$((sn + tok)) st=$(awk -v a="$st" -v b="$sec" 'BEGIN { print a + b }')
        acc="$acc $(awk '/^accept/ { print $3; exit }' "$tmp/spec")"
    done <"$prompts"
    awk -v r=$r -v pn=$pn -v pt="$pt" -v sn=$sn -v st="$st" -v acc="$acc" \
        'BEGIN { printf "round %d llama.cpp plain %.2f spec %.2f accept%s\n", r, pn / (pt / 1000), sn / st, acc }'
done | tee "$tmp/rounds"
[ "$(grep -c . "$tmp/rounds")" -eq $((2 * rounds)) ] || { echo "bench-spec-llama: a round failed" >&2; exit 1; }
awk '
    function med(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return a[int((n + 1) / 2)]
    }
    { k = $3; i = ++c[k]; p[k, i] = $5; s[k, i] = $7; x[k, i] = $7 / $5 }
    END {
        for (k in c) {
            n = c[k]
            for (i = 1; i <= n; i++) { a[i] = p[k, i]; b[i] = s[k, i]; d[i] = x[k, i] }
            printf "%-9s plain %7.1f t/s  speculating %7.1f t/s  speedup %.2fx (median of %d rounds each)\n",
                k, med(a, n), med(b, n), med(d, n), n
        }
    }' "$tmp/rounds"
