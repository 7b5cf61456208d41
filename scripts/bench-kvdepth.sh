#!/bin/bash
# bench-kvdepth.sh LLM GGUF LLAMA_BIN TEXT [ROUNDS]: decode speed after a long
# prompt (TEXT) for each KV cache type, ours from a state file of the prompt
# (llm-run --kv-in, so the prompt is computed once per type) and llama.cpp's
# (llama-cli -fa -ctk T -ctv T, its eval time), in the same run. LLM is the
# .llm import of GGUF; 64 greedy tokens, 2 threads; ours in ROUNDS rounds.
set -u
llm=$1 gguf=$2 lb=$3 text=$4 rounds=${5:-3}
bin=$(dirname "$0")/../bin
export LD_LIBRARY_PATH=$lb
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
gen() { grep -o 'generation: [0-9]* tokens in [0-9.]* s ([0-9.]* tokens/s)'; }
for t in f16 bf16 q8 f32; do
    "$bin/llm-run" -m "$llm" -f "$text" --prefill-only --kv-out "$dir/$t.kv" --kv-type $t -t 2 -v 2>&1 |
        grep -o 'prompt: [0-9]* tokens' | sed "s/^/$t state: /"
    echo "$t state file: $(wc -c <"$dir/$t.kv") bytes"
done
for r in $(seq "$rounds"); do
    for t in f16 bf16 q8 f32; do
        echo "ours $t: $("$bin/llm-run" -m "$llm" --kv-in "$dir/$t.kv" -n 64 --temp 0 --ignore-eos -t 2 -v 2>&1 >/dev/null | gen)"
    done
    echo "ours depth 0: $("$bin/llm-run" -m "$llm" -p Hello -n 64 --temp 0 --ignore-eos -t 2 -v 2>&1 >/dev/null | gen)"
done
for t in f16 q8_0 q4_0; do
    echo "llama.cpp $t: $("$lb/llama-cli" -m "$gguf" -f "$text" -n 64 --temp 0 -t 2 -no-cnv --no-warmup -c 4096 -fa \
        -ctk $t -ctv $t --ignore-eos 2>&1 | grep -E '^llama_perf_context_print: +eval time' | sed 's/.*(//')"
done
