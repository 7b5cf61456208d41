#!/bin/bash
# bench-serve.sh MODEL.gguf: llm-run --batch against one llm-run per request
# and against llama.cpp's llama-server with continuous batching, on the same
# request file, and the prefix cache's effect on TTFT (issue 19's table).
#
#   LLAMA=/path/to/llama.cpp/build/bin scripts/bench-serve.sh models/SmolLM2-135M-Instruct.Q4_1.gguf
#
# Environment: N (requests, 256), SEQS (--max-seqs and llama-server -np, 16),
# THREADS (2), TEXT (the text the prompts are cut from), OUT (a folder for the
# files, a temporary one by default), SKIP_SINGLE=1 to skip the one-at-a-time
# loop. Needs python3 (requests file, client for llama-server). Prints a
# markdown table; every figure is one run, so run it on an idle machine and
# more than once.
set -eu
model=${1:?usage: bench-serve.sh MODEL.gguf}
N=${N:-256}
SEQS=${SEQS:-16}
THREADS=${THREADS:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TEXT=${TEXT:-$ROOT/../shared/data/text/tinystories_val.txt}
OUT=${OUT:-$(mktemp -d /tmp/bench-serve-XXXXXX)}
BIN=${LLM_BIN:-$ROOT/bin}
mkdir -p "$OUT"
llm=$OUT/model.llm
[ -e "$llm" ] || "$BIN/llm-convert" "$model" -o "$llm" >/dev/null

# prompts of ~32-512 tokens (about 1.3 tokens a word), outputs of 16-256
"$ROOT/scripts/make-batch.py" "$TEXT" -n "$N" --prompt-words 24:384 --max-tokens 16:256 \
    --seed 1 >"$OUT/req.jsonl"
"$ROOT/scripts/make-batch.py" "$TEXT" -n "$N" --prompt-words 24:96 --max-tokens 16:64 \
    --shared-prefix-words 300 --seed 2 >"$OUT/req-prefix.jsonl"

now() { date +%s.%N; }
field() { python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); v=o
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$1" "$2"; }

# 1. the batch
t0=$(now)
"$BIN/llm-run" -m "$llm" --batch "$OUT/req.jsonl" -o "$OUT/batch.jsonl" --max-seqs "$SEQS" \
    -t "$THREADS" --stats-json "$OUT/batch-stats.json" 2>"$OUT/batch.err"
t_batch=$(python3 -c "print($(now) - $t0)")
gen_batch=$(field "$OUT/batch-stats.json" completion_tokens)

# 2. one llm-run per request, as a shell loop would
t_single=0 gen_single=0
if [ "${SKIP_SINGLE:-0}" != 1 ]; then
    python3 - "$OUT/req.jsonl" "$OUT/single" <<'PY'
import json, os, sys
os.makedirs(sys.argv[2], exist_ok=True)
for i, l in enumerate(open(sys.argv[1])):
    b = json.loads(l)["body"]
    open(f"{sys.argv[2]}/{i:05d}.txt", "w").write(b["prompt"])
    open(f"{sys.argv[2]}/{i:05d}.n", "w").write(str(b["max_tokens"]))
PY
    t0=$(now)
    for p in "$OUT"/single/*.txt; do
        "$BIN/llm-run" -m "$llm" -f "$p" -n "$(cat "${p%.txt}.n")" --temp 0 -t "$THREADS" --json \
            >"${p%.txt}.json" 2>/dev/null
    done
    t_single=$(python3 -c "print($(now) - $t0)")
    gen_single=$(cat "$OUT"/single/*.json | python3 -c 'import json,sys; print(sum(json.loads(l)["generated_tokens"] for l in sys.stdin))')
fi

# 3. llama-server -np SEQS -cb, fed by a local client over loopback
t_server=0 gen_server=0
if [ -n "${LLAMA:-}" ] && [ -x "$LLAMA/llama-server" ]; then
    port=18089
    "$LLAMA/llama-server" -m "$model" -np "$SEQS" -cb -c $((SEQS * 1024)) -t "$THREADS" \
        --port $port --host 127.0.0.1 >"$OUT/server.log" 2>&1 &
    spid=$!
    trap 'kill $spid 2>/dev/null || true' EXIT
    for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.5; done
    python3 - "$OUT/req.jsonl" $port "$SEQS" "$OUT/server-stats.json" <<'PY'
import json, sys, threading, time, urllib.request
reqs = [json.loads(l)["body"] for l in open(sys.argv[1])]
port, seqs = int(sys.argv[2]), int(sys.argv[3])
lock, out, it = threading.Lock(), [], iter(range(len(reqs)))
def worker():
    while True:
        with lock:
            i = next(it, None)
        if i is None:
            return
        b = reqs[i]
        body = json.dumps({"prompt": b["prompt"], "max_tokens": b["max_tokens"], "temperature": 0}).encode()
        r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
        o = json.load(urllib.request.urlopen(r, timeout=3600))
        with lock:
            out.append(o["usage"]["completion_tokens"])
t0 = time.time()
ts = [threading.Thread(target=worker) for _ in range(2 * seqs)]
[t.start() for t in ts]
[t.join() for t in ts]
json.dump({"seconds": time.time() - t0, "completion_tokens": sum(out), "requests": len(out)}, open(sys.argv[4], "w"))
PY
    kill $spid; wait $spid 2>/dev/null || true
    trap - EXIT
    t_server=$(field "$OUT/server-stats.json" seconds)
    gen_server=$(field "$OUT/server-stats.json" completion_tokens)
fi

# 4. a shared ~400-token system prompt: TTFT with and without the prefix cache
"$BIN/llm-run" -m "$llm" --batch "$OUT/req-prefix.jsonl" -o /dev/null --max-seqs "$SEQS" \
    -t "$THREADS" --stats-json "$OUT/prefix-on.json" 2>/dev/null
"$BIN/llm-run" -m "$llm" --batch "$OUT/req-prefix.jsonl" -o /dev/null --max-seqs "$SEQS" \
    -t "$THREADS" --no-prefix-cache --stats-json "$OUT/prefix-off.json" 2>/dev/null

echo "| run | seconds | generated tokens | generated tokens/s | requests/s |"
echo "|---|---:|---:|---:|---:|"
row() { [ "$2" = 0 ] && return; python3 -c "import sys; n,s,g=sys.argv[1],float(sys.argv[2]),int(sys.argv[3]); print(f'| {n} | {s:.1f} | {g} | {g/s:.1f} | {$N/s:.2f} |')" "$1" "$2" "$3"; }
row "llm-run --batch --max-seqs $SEQS" "$t_batch" "$gen_batch"
row "llm-run, one request at a time" "$t_single" "$gen_single"
row "llama-server -np $SEQS -cb" "$t_server" "$gen_server"
echo
for f in on off; do
    printf '| prefix cache %s | TTFT p50 %s s | p90 %s s | %s s in all | %s of %s prompt tokens found |\n' "$f" \
        "$(field "$OUT/prefix-$f.json" ttft_s.p50)" "$(field "$OUT/prefix-$f.json" ttft_s.p90)" \
        "$(field "$OUT/prefix-$f.json" seconds)" "$(field "$OUT/prefix-$f.json" prefix_hit_tokens)" \
        "$(field "$OUT/prefix-$f.json" prefix_lookup_tokens)"
done
echo "files in $OUT"
