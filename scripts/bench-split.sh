#!/bin/bash
# bench-split.sh MODEL TEXT [ROUNDS] [REQUESTS] [CHARS] [TOKENS]: what the
# prefill/decode split (llm-run --role) buys on a 2-core machine. REQUESTS
# (default 24) requests whose prompts are slices of CHARS characters of TEXT
# (default 3600: about 900 tokens), TOKENS (default 64) greedy tokens each,
# all queued at once, run
#   one    one process on both cores: taskset -c 0,1 llm-run --batch -t 2
#   split  taskset -c 0 llm-run --role prefill -t 1 | taskset -c 1 llm-run --role decode -t 1
# in alternating rounds (default 3). Both must write the same lines. Prints
# the medians of the run's wall time, inter-token latency p50/p99 (the gaps
# a streaming client sees) and output tokens/s. (TTFT is left out: the
# decode side counts it from a state's arrival, not from the start.)
set -eu
model=$1 text=$2 rounds=${3:-3} n=${4:-24} chars=${5:-3600} toks=${6:-64}
bin=$(dirname "$0")/../bin
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$text" "$n" "$chars" "$toks" >"$dir/req.jsonl" <<'PY'
import json, sys
text = open(sys.argv[1], encoding='utf-8', errors='replace').read()
n, chars, toks = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    at = (i * 7919 * chars) % max(1, len(text) - chars)
    print(json.dumps({"custom_id": f"r{i}", "body": {"prompt": text[at:at + chars],
                                                     "max_tokens": toks, "temperature": 0}}))
PY
strip() { sed -E 's/"created":[0-9]+,//' "$1" | sort; }
for r in $(seq "$rounds"); do
    s=$(date +%s.%N)
    taskset -c 0,1 "$bin/llm-run" -m "$model" --batch "$dir/req.jsonl" -t 2 --ignore-eos \
        -o "$dir/one.jsonl" --stats-json "$dir/one.json" 2>/dev/null
    e=$(date +%s.%N)
    echo "one $(echo "$e - $s" | bc) $(cat "$dir/one.json")"
    s=$(date +%s.%N)
    taskset -c 0 "$bin/llm-run" -m "$model" --batch "$dir/req.jsonl" --role prefill -t 1 2>/dev/null |
        taskset -c 1 "$bin/llm-run" -m "$model" --role decode -t 1 --ignore-eos \
            -o "$dir/split.jsonl" --stats-json "$dir/split.json" 2>/dev/null
    e=$(date +%s.%N)
    echo "split $(echo "$e - $s" | bc) $(cat "$dir/split.json")"
    diff <(strip "$dir/one.jsonl") <(strip "$dir/split.jsonl") >/dev/null ||
        { echo "bench-split.sh: the split's lines differ from one process's" >&2; exit 1; }
done >"$dir/runs"
python3 - "$dir/runs" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, wall, js = line.split(' ', 2)
    j = json.loads(js)
    rows.setdefault(name, []).append((float(wall), j["itl_s"]["p50"], j["itl_s"]["p99"],
                                      j["completion_tokens"] / float(wall)))
print("%-6s %6s %9s %10s %10s %9s" % ("run", "rounds", "wall s", "ITL p50", "ITL p99", "tok/s"))
for name, v in rows.items():
    med = [statistics.median(c) for c in zip(*v)]
    print("%-6s %6d %9.2f %8.1fms %8.1fms %9.1f" % (name, len(v), med[0], 1e3 * med[1],
                                                    1e3 * med[2], med[3]))
PY
