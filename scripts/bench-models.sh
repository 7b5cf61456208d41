# bench-models.sh: sourced by bench-llama-cpp.sh, bench-batched.sh and
# bench-archs.sh.
# bench_models DIR TYPES makes the models both compare against llama.cpp,
# once, in DIR: a stories110m-shaped synthetic model per type of TYPES
# (.llm, exported to GGUF for llama.cpp), and SmolLM2-135M-Instruct Q4_1
# when models/ has its GGUF (scripts/fetch-model.sh). It sets $models
# (DIR/s110-TYPE stems, and "smol") and $smol (the GGUF's path).
bench_models() {
    mkdir -p "$1"
    models=
    for t in $2; do
        m=$1/s110-$t
        [ -r "$m.gguf" ] || {
            bin/llm-convert --synthetic stories110m --type "$t" --seed 1 -o "$m.llm" -q &&
                bin/llm-convert "$m.llm" -o "$m.gguf" -q
        }
        models="$models $m"
    done
    smol=models/SmolLM2-135M-Instruct.Q4_1.gguf
    if [ -r "$smol" ]; then
        [ -r "$1/smollm2.llm" ] || bin/llm-convert "$smol" -o "$1/smollm2.llm" -q
        models="$models smol"
    fi
}

# peer_tps GGUF ARGS...: llama-bench's mean tokens/s ($lb, $threads), empty
# when it gave none; ours_tps LLM COL ARGS...: llm-bench's median for the
# test named COL* (pp or tg)
peer_tps() {
    g=$1
    shift
    "$lb" -m "$g" "$@" -t "$threads" -r 3 -o csv 2>/dev/null | tr -d '"' |
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next } { print $(h["avg_ts"]) }'
}
ours_tps() {
    l=$1 c=$2
    shift 2
    bin/llm-bench -m "$l" "$@" -t "$threads" -r 3 -o csv 2>/dev/null |
        awk -F, -v c="$c" 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
            index($(h["test"]), c) == 1 { print $(h["median_ts"]) }'
}
