#!/bin/bash
# bench-kvstate.sh LLM GGUF LLAMA_BIN TEXT [ROUNDS]: KV state files against
# recomputing the prompt, and llm-run's --prompt-cache against llama.cpp's
# (llama-cli --prompt-cache), in alternating rounds on the same machine.
# LLM is the .llm import of GGUF; TEXT the prompt. Wall time of each whole
# process (model load included), 16 greedy tokens, 2 threads; medians.
set -u
llm=$1 gguf=$2 lb=$3 text=$4 rounds=${5:-5}
bin=$(dirname "$0")/../bin
export LD_LIBRARY_PATH=$lb
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
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
