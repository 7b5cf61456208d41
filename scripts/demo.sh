#!/bin/sh
# demo.sh: the main job on a real model: fetch SmolLM2-135M-Instruct (GGUF
# Q4_1), convert it to .llm, and show what is inside.
set -eu
bin=${LLM_BIN:-bin}
model=$(scripts/fetch-model.sh models)
out=models/SmolLM2-135M-Instruct.Q4_1.llm
echo "== llm-convert $model -o $out" >&2
"$bin/llm-convert" -v "$model" -o "$out"
echo "== llm-convert --verify $out" >&2
"$bin/llm-convert" --verify "$out"
echo "== llm-convert --info $out (first 60 lines)" >&2
"$bin/llm-convert" --info "$out" | head -60
echo "..." 
"$bin/llm-convert" --info "$out" | tail -6
