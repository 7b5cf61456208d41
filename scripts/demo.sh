#!/bin/sh
# demo.sh: the main job on a real model: fetch SmolLM2-135M-Instruct (GGUF
# Q4_1), convert it to .llm, show what is inside, quantize it with GPTQ, and
# show what the quantization cost beside the published model: the answers
# to the same questions, file sizes, perplexity and decode speed.
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
# 32 windows of 256 tokens: 8,192 tokens, 5.3 per input of the widest
# matrix (ffn_down, 1536), about a minute on 2 cores. With 8 x 256 (1.3 per
# input) GPTQ fitted the calibration text instead of the model and answered
# "What is the capital of France?" with "La Ville de France, la Ville de
# France, ..." (llm-quantize(1) and the README have the measurements);
# tests/cli/llm-quantize.sh checks these settings' answers.
samples=32
seq_len=256
data=${LLM_DATA:-../shared/data}
calib=$data/text/calibration_datav3.txt
wiki=$data/text/wiki.test.raw
gptq=models/SmolLM2-135M-Instruct.gptq.llm
questions=scripts/demo-questions.tsv
if [ ! -r "$calib" ]; then
    echo "== $calib is absent: skipping the GPTQ step (set LLM_DATA)" >&2
    exit 0
fi
echo "== llm-quantize -m $out -o $gptq --method gptq --calib $calib --samples $samples --seq-len $seq_len" >&2
"$bin/llm-quantize" -m "$out" -o "$gptq" --method gptq --calib "$calib" --samples $samples \
    --seq-len $seq_len --allow-requantize --report models/gptq-report.json

# ---- what the quantization cost ---------------------------------------------
# the first sentence of an answer (at most about 200 bytes), wrapped and
# indented under its label
sentence() {
    awk '{ s = s (NR > 1 ? " " : "") $0 }
         END { sub(/^ +/, "", s)
               if (match(s, /[.!?]( |$)/)) s = substr(s, 1, RSTART)
               if (length(s) > 200) { s = substr(s, 1, 197); sub(/ [^ ]*$/, "", s); s = s " ..." }
               print s }' | fold -s -w 68 | sed 's/ *$//; 2,$s/^/          /'
}
mb() { awk -v b="$(wc -c <"$1")" 'BEGIN { printf "%.1f", b / 1e6 }'; }
row() { printf '  %-44s %12s %12s\n' "$1" "$2" "$3"; }

echo "== comparing $out and $gptq (llm-bench, llm-run)" >&2
ppl=; agree=
if [ -r "$wiki" ]; then
    ppl=$("$bin/llm-bench" -q -m "$gptq" --base "$out" --ppl "$wiki" --ctx 512 --chunks 4) || ppl=
fi
speed=$("$bin/llm-bench" -q -m "$out" -m "$gptq" -n 64 -r 3 -o jsonl) || speed=
ts() { printf '%s\n' "$speed" | sed -n "$1s/.*\"median_ts\": *\([0-9.]*\).*/\1/p" | awk '{ printf "%.1f", $1 }'; }
threads=$(printf '%s\n' "$speed" | sed -n '1s/.*"n_threads": *\([0-9]*\).*/\1/p')

echo
echo "What GPTQ cost: SmolLM2-135M-Instruct as published (Q4_1: 4 bits in groups of 32, a"
echo "scale and a minimum each) against GPTQ at 4 bits in groups of 128 (64 for the 576-wide"
echo "rows) with zero points, calibrated on $samples windows of $seq_len tokens of $(basename "$calib")."
echo "Both keep the embedding table (which is also the output head) in q8_0."
echo
row "" "Q4_1" "GPTQ"
row "file size, MB" "$(mb "$out")" "$(mb "$gptq")"
if [ -n "$ppl" ]; then
    val() { printf '%s\n' "$ppl" | sed -n "s/^$1 = \([0-9.]*\).*/\1/p" | awk -v f="$2" '{ printf f, $1 }'; }
    row "perplexity on wiki.test.raw (lower: better)*" "$(val 'PPL(base)' %.2f)" "$(val 'PPL(model)' %.2f)"
    row "next token the same as Q4_1's*" "-" "$(val 'top-1 agreement' %.1f) %"
fi
[ -n "$speed" ] && row "decode, tokens/s ($threads threads)**" "$(ts 1)" "$(ts 2)"
[ -n "$ppl" ] &&
    echo "  * the first 4 windows of 512 tokens: llm-bench --ppl --base --ctx 512 --chunks 4"
[ -n "$speed" ] && echo "  ** 64 tokens, median of 3 runs: llm-bench -n 64 -r 3"
echo
echo "The same questions to both, greedy (llm-run --chat --temp 0 -n 40), first sentences:"
grep -v '^#' "$questions" | cut -f1 | while IFS= read -r q; do
    echo
    echo "  $q"
    printf '    Q4_1: %s\n' "$("$bin/llm-run" -q -m "$out" --chat -p "$q" -n 40 --temp 0 | sentence)"
    printf '    GPTQ: %s\n' "$("$bin/llm-run" -q -m "$gptq" --chat -p "$q" -n 40 --temp 0 | sentence)"
done
echo
