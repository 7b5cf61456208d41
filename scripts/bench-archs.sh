#!/bin/sh
# bench-archs.sh: prefill and decode speed of a ~110M random model of each
# architecture, against our Llama path and against llama.cpp's llama-bench
# where llama.cpp b4748 runs the architecture (llama, mistral as llama,
# qwen2, gemma2, phi3, mixtral as llama, qwen2moe; not qwen3, gemma3 nor
# qwen3moe, which came after it). The mixtures of experts have the dense
# shape's active parameters (2 of 8 experts of the llama shape's width; 4
# of 16 half as wide), so "vs llama" is their cost per active parameter. ROUNDS
# rounds alternate the programs (each -r 3); medians per model and test.
# The closing note's architecture table was measured this way.
#
#   LLAMA_BENCH=/path/llama-bench scripts/bench-archs.sh [DIR]
#
# DIR (default build/bench-archs) receives the models (q8_0 .llm, exported
# to GGUF). Environment: THREADS (2), ROUNDS (3), TYPE (q8_0), TESTS
# ("-p 128" and "-n 64", one per line), ARCHS (all of them). Without
# LLAMA_BENCH only ours run.
set -eu
lb=${LLAMA_BENCH:-}
dir=${1:-build/bench-archs}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
type=${TYPE:-q8_0}
tests=${TESTS:-"-p 128
-n 64"}
make --no-print-directory bin/llm-bench bin/llm-convert >/dev/null
. scripts/bench-models.sh
mkdir -p "$dir"
# name, llama.cpp runs it (1/0), then the YAML lines; every shape has the
# stories110m sizes (768 wide, 2048 feed-forward, 32000 tokens) except
# gemma2, which llama.cpp b4748 runs only with 26, 42 or 46 layers: 26
# layers 512 wide
shape() {
    common="vocab_size: 32000
context_length: 2048
rope_theta: 10000.0
rms_norm_eps: 1e-5
tie_embeddings: true"
    wide="embedding_length: 768
feed_forward_length: 2048
block_count: 12
head_count: 12"
    case $1 in
    llama) printf '%s\n' "architecture: llama" "$wide" "head_count_kv: 12" "$common" ;;
    mistral) printf '%s\n' "architecture: mistral" "sliding_window: 256" "$wide" "head_count_kv: 4" "$common" ;;
    qwen2) printf '%s\n' "architecture: qwen2" "$wide" "head_count_kv: 4" "$common" ;;
    qwen3) printf '%s\n' "architecture: qwen3" "$wide" "head_count_kv: 4" "head_dim: 64" "$common" ;;
    gemma2) printf '%s\n' "architecture: gemma2" "sliding_window: 256" "attn_softcap: 50.0" \
        "final_softcap: 30.0" "embedding_length: 512" "feed_forward_length: 1536" \
        "block_count: 26" "head_count: 8" "head_count_kv: 4" "head_dim: 64" "$common" ;;
    gemma3) printf '%s\n' "architecture: gemma3" "sliding_window: 256" "$wide" "head_count_kv: 4" \
        "head_dim: 64" "$common" ;;
    phi3) printf '%s\n' "architecture: phi3" "$wide" "head_count_kv: 12" "$common" ;;
    mixtral) printf '%s\n' "architecture: mixtral" "expert_count: 8" "expert_used_count: 2" \
        "expert_feed_forward_length: 1024" "$wide" "head_count_kv: 4" "$common" ;;
    qwen2moe) printf '%s\n' "architecture: qwen2moe" "expert_count: 8" "expert_used_count: 2" \
        "expert_feed_forward_length: 512" "expert_shared_feed_forward_length: 1024" "$wide" \
        "head_count_kv: 12" "$common" ;;
    qwen3moe) printf '%s\n' "architecture: qwen3moe" "expert_count: 16" "expert_used_count: 4" \
        "expert_feed_forward_length: 512" "$wide" "head_count_kv: 4" "head_dim: 64" "$common" ;;
    esac
}
archs=${ARCHS:-"llama mistral qwen2 qwen3 gemma2 gemma3 phi3 mixtral qwen2moe qwen3moe"}
for a in $archs; do
    [ -r "$dir/$a.gguf" ] && continue
    shape "$a" >"$dir/$a.yaml"
    bin/llm-convert --synthetic "$dir/$a.yaml" --type "$type" -o "$dir/$a.llm" -q
    bin/llm-convert "$dir/$a.llm" -o "$dir/$a.gguf" -q
done
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
        for a in $archs; do
            case $a in qwen3 | gemma3 | qwen3moe) peer= ;; *) peer=$lb ;; esac
            if [ -n "$peer" ]; then
                # shellcheck disable=SC2086
                v=$(peer_tps "$dir/$a.gguf" $theirs)
                [ -n "$v" ] || { echo "bench-archs: llama-bench gave no figure for $a $theirs" >&2; exit 1; }
                echo "$a $test llama.cpp $v" >>"$out"
            fi
            # shellcheck disable=SC2086
            v=$(ours_tps "$dir/$a.llm" "$col" $ours)
            [ -n "$v" ] || { echo "bench-archs: llm-bench gave no figure for $a $ours" >&2; exit 1; }
            echo "$a $test llm-tools $v" >>"$out"
        done
    done
done
# medians per (model, test, program); ours against llama.cpp and against
# our own llama path
sort -k1,1 -k2,3 -k4,4 -k5n "$out" | awk '
    { k = $1 " " $2 " " $3 " " $4; v[k, ++n[k]] = $5; t[$2 " " $3] = 1; a[$1] = 1 }
    END {
        for (k in n) med[k] = v[k, int((n[k] + 1) / 2)]
        printf "%-8s %-8s %12s %12s %8s %10s\n", "arch", "test", "llm-tools", "llama.cpp", "ratio", "vs llama"
        for (x in a) for (tt in t) {
            o = med[x " " tt " llm-tools"]; p = med[x " " tt " llama.cpp"]; base = med["llama " tt " llm-tools"]
            printf "%-8s %-8s %12.1f %12s %8s %10.2f\n", x, tt, o, p ? sprintf("%.1f", p) : "-",
                p ? sprintf("%.2fx", o / p) : "-", o / base
        }
    }' | sort
