#!/bin/bash
# bench-spec-batch.sh TARGET.llm DRAFT.llm: llm-run --batch plainly and
# speculating (--lookup on the input-grounded prompts of scripts/spec-prompts,
# --draft DRAFT on the open-ended ones), as chat requests, greedy, 128 tokens
# at most, at 1 and 6 sequences; medians of alternating rounds of output
# tokens/s from --stats-json, and a check that every speculating output file
# is the plain one. Prints markdown rows (the README's batch speculation
# table).
#
#   ROUNDS=3 THREADS=2 scripts/bench-spec-batch.sh sm-f32.llm sm-q4_0.llm
set -eu
target=${1:?usage: bench-spec-batch.sh TARGET.llm DRAFT.llm}
draft=${2:?usage: bench-spec-batch.sh TARGET.llm DRAFT.llm}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${LLM_BIN:-$ROOT/bin}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
OUT=$(mktemp -d /tmp/bench-spec-batch-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
for set in grounded open; do
    python3 - "$ROOT/scripts/spec-prompts/$set.txt" "$OUT/$set.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as o:
    for i, l in enumerate(f):
        t = l.rstrip("\n").replace("\\n", "\n")
        o.write(json.dumps({"custom_id": f"p{i}", "url": "/v1/chat/completions",
                            "body": {"messages": [{"role": "user", "content": t}],
                                     "max_tokens": 128, "temperature": 0}}) + "\n")
PY
done
strip() { sed -E 's/"created":[0-9]+,//' "$1" | sort; }
for seqs in 1 6; do
    for set in grounded open; do
        if [ $set = grounded ]; then spec=(--lookup); else spec=(--draft "$draft"); fi
        : >"$OUT/p.txt"
        : >"$OUT/s.txt"
        for _ in $(seq "$ROUNDS"); do
            "$BIN/llm-run" -m "$target" --batch "$OUT/$set.jsonl" -o "$OUT/plain.jsonl" -t "$THREADS" \
                --max-seqs $seqs --stats-json "$OUT/plain.json" 2>/dev/null
            "$BIN/llm-run" -m "$target" --batch "$OUT/$set.jsonl" -o "$OUT/spec.jsonl" -t "$THREADS" \
                --max-seqs $seqs "${spec[@]}" --stats-json "$OUT/spec.json" 2>/dev/null
            diff <(strip "$OUT/plain.jsonl") <(strip "$OUT/spec.jsonl") >/dev/null ||
                { echo "bench-spec-batch: $set at $seqs sequences: the answers differ" >&2; exit 1; }
            python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["output_tokens_per_s"])' \
                "$OUT/plain.json" >>"$OUT/p.txt"
            python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); s=o["speculation"]; print(o["output_tokens_per_s"], s["acceptance_rate"], s["passes_per_token"])' \
                "$OUT/spec.json" >>"$OUT/s.txt"
        done
        python3 - "$(basename "$target")" $seqs "$set, ${spec[*]}" "$OUT/p.txt" "$OUT/s.txt" <<'PY'
import statistics as st, sys
p = [float(l) for l in open(sys.argv[4])]
s = [list(map(float, l.split())) for l in open(sys.argv[5])]
mp, ms = st.median(p), st.median(x[0] for x in s)
print(f"| {sys.argv[1]} | {sys.argv[2]} | {sys.argv[3]} | {mp:.1f} | {ms:.1f} | {ms / mp:.2f}x "
      f"| {100 * s[-1][1]:.0f}% | {s[-1][2]:.3f} |")
PY
    done
done
