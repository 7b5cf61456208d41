#!/bin/sh
# demo.sh: the main job on a real model: fetch SmolLM2-135M-Instruct (GGUF
# Q4_1), convert it to .llm, show what is inside, quantize it with GPTQ and
# generate from the result.
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
# The published SmolLM2 we fetch is already Q4_1; its weights are dequantized
# and quantized again with GPTQ (4 bits, zero points, groups of 128) on a
# small calibration set, which --allow-requantize makes explicit.
data=${LLM_DATA:-../shared/data}
calib=$data/text/calibration_datav3.txt
gptq=models/SmolLM2-135M-Instruct.gptq.llm
if [ -r "$calib" ]; then
    echo "== llm-quantize -m $out -o $gptq --method gptq --calib $calib --samples 8 --seq-len 256" >&2
    "$bin/llm-quantize" -m "$out" -o "$gptq" --method gptq --calib "$calib" --samples 8 \
        --seq-len 256 --allow-requantize --report models/gptq-report.json
    echo "== llm-run -m $gptq --chat -p 'What is the capital of France?' -n 40 --temp 0" >&2
    "$bin/llm-run" -m "$gptq" --chat -p 'What is the capital of France?' -n 40 --temp 0
    echo
else
    echo "== $calib is absent: skipping the GPTQ step (set LLM_DATA)" >&2
fi
