# bench-models.sh: sourced by bench-llama-cpp.sh and bench-batched.sh.
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
