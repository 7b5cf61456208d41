#!/bin/bash
# bench-kvstate.sh MODE LLM GGUF LLAMA_BIN TEXT [ROUNDS]: the KV cache's files
# and types against llama.cpp b4748 in the same run, on the prompt TEXT. LLM
# is the .llm import of GGUF; 2 threads.
#   files  state files (--prefill-only --kv-out, --kv-in) against computing
#          the prompt, and --prompt-cache against llama-cli's: wall time of
#          each whole process (model load included), 16 greedy tokens,
#          alternating rounds (default 5), medians
#   depth  decode of 64 tokens after the prompt for each KV type (k8v4: q8
#          keys, q4 values; q4ch: per-channel keys, q4 values), ours from a
#          state of the prompt (computed once per type), llama.cpp's with
#          llama-cli -fa -ctk T -ctv T (its eval time); ROUNDS alternating
#          rounds (default 3)
set -u
mode=$1 llm=$2 gguf=$3 lb=$4 text=$5
bin=$(dirname "$0")/../bin
export LD_LIBRARY_PATH=$lb
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

files() {
    rounds=${1:-5}
    t() {
        local s e
        s=$(date +%s.%N)
        "$@" >/dev/null 2>&1 || echo "failed: $*" >&2
        e=$(date +%s.%N)
        echo "$e - $s" | bc
}
o="-n 16 --temp 0 -t 2"
for r in $(seq "$rounds"); do
    # shellcheck disable=SC2086
    {
        echo "plain $(t "$bin/llm-run" -m "$llm" -f "$text" $o)"
        echo "prefill_only $(t "$bin/llm-run" -m "$llm" -f "$text" --prefill-only --kv-out "$dir/st.kv" -t 2)"
        echo "prefill_only_zstd $(t "$bin/llm-run" -m "$llm" -f "$text" --prefill-only --kv-out "$dir/stz.kv" --kv-compress -t 2)"
        echo "kv_in $(t "$bin/llm-run" -m "$llm" --kv-in "$dir/st.kv" $o)"
        echo "kv_in_zstd $(t "$bin/llm-run" -m "$llm" --kv-in "$dir/stz.kv" $o)"
        rm -f "$dir/pc.kv"
        echo "prompt_cache_miss $(t "$bin/llm-run" -m "$llm" -f "$text" $o --prompt-cache "$dir/pc.kv")"
        echo "prompt_cache_hit $(t "$bin/llm-run" -m "$llm" -f "$text" $o --prompt-cache "$dir/pc.kv")"
        echo "llama_plain $(t "$lb/llama-cli" -m "$gguf" -f "$text" $o -no-cnv --no-warmup -c 2048)"
        rm -f "$dir/lpc.bin"
        echo "llama_prompt_cache_miss $(t "$lb/llama-cli" -m "$gguf" -f "$text" $o -no-cnv --no-warmup -c 2048 --prompt-cache "$dir/lpc.bin")"
        echo "llama_prompt_cache_hit $(t "$lb/llama-cli" -m "$gguf" -f "$text" $o -no-cnv --no-warmup -c 2048 --prompt-cache "$dir/lpc.bin")"
    } >>"$dir/times"
    echo "round $r done" >&2
done
awk '{ v[$1] = v[$1] " " $2 } END { for (k in v) print k, v[k] }' "$dir/times" |
    while read -r k rest; do
        printf '%-24s median %6.3f s  (%s)\n' "$k" \
            "$(echo "$rest" | tr ' ' '\n' | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')" "$rest"
    done | sort
ls -l "$dir"/st.kv "$dir"/stz.kv "$dir"/pc.kv "$dir"/lpc.bin | awk '{ print $5, $NF }'
}

depth() {
    rounds=${1:-3}
    gen() { grep -o 'generation: [0-9]* tokens in [0-9.]* s ([0-9.]* tokens/s)'; }
    # k8v4: q8 keys and q4 values
    opts() { if [ "$1" = k8v4 ]; then echo "--kv-type-k q8 --kv-type-v q4"; else echo "--kv-type $1"; fi; }
    types="f16 bf16 q8 fp8_e4m3 q4 k8v4 q4ch f32"
    for t in $types; do
        # shellcheck disable=SC2046 # opts gives several words
        "$bin/llm-run" -m "$llm" -f "$text" --prefill-only --kv-out "$dir/$t.kv" $(opts $t) -t 2 -v 2>&1 |
            grep -o 'prompt: [0-9]* tokens' | sed "s/^/$t state: /"
        echo "$t state file: $(wc -c <"$dir/$t.kv") bytes"
    done
    for r in $(seq "$rounds"); do # alternating: ours, then llama.cpp's, each round
        for t in $types; do
            echo "ours $t: $("$bin/llm-run" -m "$llm" --kv-in "$dir/$t.kv" -n 64 --temp 0 --ignore-eos -t 2 -v 2>&1 >/dev/null | gen)"
        done
        echo "ours depth 0: $("$bin/llm-run" -m "$llm" -p Hello -n 64 --temp 0 --ignore-eos -t 2 -v 2>&1 >/dev/null | gen)"
        for t in f16 q8_0 q4_0; do
            echo "llama.cpp $t: $("$lb/llama-cli" -m "$gguf" -f "$text" -n 64 --temp 0 -t 2 -no-cnv --no-warmup \
                -c 4096 -fa -ctk $t -ctv $t --ignore-eos 2>&1 | grep -E '^llama_perf_context_print: +eval time' |
                sed 's/.*(//')"
        done
    done
}

case $mode in
files | depth) "$mode" "${6:-}" ;;
*) echo "bench-kvstate: MODE is files or depth, not '$mode'" >&2; exit 2 ;;
esac
