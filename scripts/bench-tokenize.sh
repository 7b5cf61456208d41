#!/bin/sh
# bench-tokenize.sh: tokenizer throughput on WikiText-2 (wiki.test.raw) with
# the gpt-2 (byte-level BPE) and llama-spm (SentencePiece) vocabularies.
# Prints MB/s, the median of 5 runs of llm_tokenize on the whole file.
#
#   scripts/bench-tokenize.sh            (LLM_DATA defaults to ../shared/data)
#   LLAMA_TOKENIZE=/path/llama-tokenize scripts/bench-tokenize.sh
#       also times llama.cpp's llama-tokenize on the same input; those
#       figures are whole-process (load, tokenize, print ids), so they are a
#       lower bound on its tokenizer alone.
set -eu
data=${LLM_DATA:-../shared/data}
text=$data/text/wiki.test.raw
[ -r "$text" ] || { echo "bench-tokenize: $text is absent (set LLM_DATA)" >&2; exit 1; }
make --no-print-directory lib >/dev/null
mkdir -p build
# link exactly as the Makefile links the tools (CUDA libraries when built with them)
ldlibs=$(printf 'print-ldlibs:\n\t@echo $(LDLIBS)\n' | make --no-print-directory -f Makefile -f - print-ldlibs)
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -O2 -o build/bench-tokenize tests/bench/bench_tokenize.c build/libllm.a $ldlibs
for v in gpt-2 llama-spm; do
    m=$data/vocab/ggml-vocab-$v.gguf
    [ -r "$m" ] || { echo "bench-tokenize: $m is absent, skipped" >&2; continue; }
    printf '%-10s llm-tools  ' "$v"
    build/bench-tokenize "$m" "$text" 5
    if [ -n "${LLAMA_TOKENIZE:-}" ]; then
        bytes=$(wc -c <"$text")
        ts=
        for i in 1 2 3 4 5; do
            t0=$(date +%s.%N)
            "$LLAMA_TOKENIZE" -m "$m" -f "$text" --ids --no-bos --no-escape --no-parse-special \
                --log-disable >/dev/null 2>&1
            t1=$(date +%s.%N)
            ts="$ts $(echo "$t1 - $t0" | bc)"
        done
        med=$(echo $ts | tr ' ' '\n' | sort -n | sed -n 3p)
        printf '%-10s llama.cpp  whole process, median of 5: %s s, %.2f MB/s\n' "$v" "$med" \
            "$(echo "$bytes / $med / 1000000" | bc -l)"
    fi
done
