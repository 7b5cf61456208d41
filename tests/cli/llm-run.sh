# llm-run CLI cases (sourced by tests/cli/run.sh, which defines expect,
# has, need, skip, $TMP, $DATA, $MODELS, $BIN and $ROOT).
RUN=$BIN/llm-run
R_L2C=$DATA/llama2c/stories260K.bin
R_TOK=$DATA/llama2c/tok512.bin
R_G260=$DATA/gguf/stories260K.gguf
R_EXP=$DATA/llama2c/stories260K.expected_t0_n200.txt
R_SMOL=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf

# stories260K converted from llama2.c, in $TMP/s.llm
r_stories() {
    need "$R_L2C" "$R_TOK"
    [ -e "$TMP/s.llm" ] || "$BIN/llm-convert" "$R_L2C" --tokenizer "$R_TOK" -o "$TMP/s.llm"
}
r_smol() {
    need "$R_SMOL"
    [ -e "$TMP/smol.llm" ] || "$BIN/llm-convert" "$R_SMOL" -o "$TMP/smol.llm"
}

# ---- the command line ------------------------------------------------------
t_run_help() {
    expect 0 "$RUN" -h && has "$TMP/out" "Usage: llm-run" && has "$TMP/out" "--kv-type" &&
    has "$TMP/out" "(default: 0.8)" && [ ! -s "$TMP/err" ]
}
t_run_bad_option_exits_2() {
    expect 2 "$RUN" --no-such-option && has "$TMP/err" "Try 'llm-run --help'." &&
    [ "$(wc -l <"$TMP/err")" = 2 ]
}
t_run_bad_values_exit_2() {
    expect 2 "$RUN" -m x --temp -1 && expect 2 "$RUN" -m x --kv-type q4_0 &&
    has "$TMP/err" "--kv-type" && expect 2 "$RUN" -m x --top-p 0 && expect 2 "$RUN" -m x -t 0 &&
    expect 2 "$RUN" -p hi && has "$TMP/err" "no model" &&
    expect 2 "$RUN" -m x -p a -f b && expect 2 "$RUN" -m x --tokenize --temp 0 &&
    expect 2 "$RUN" -m x --system hi && has "$TMP/err" "--system goes with --chat" &&
    expect 2 "$RUN" -m x --stop ''
}
t_run_synopsis_matches_man() {
    need "$ROOT/man/llm-run.1" "$ROOT/scripts/check-synopsis.sh"
    "$ROOT/scripts/check-synopsis.sh" "$RUN" "$ROOT/man/llm-run.1"
}

# ---- bad input -------------------------------------------------------------
t_run_missing_model_exits_1() {
    expect 1 "$RUN" -m /nonexistent/m.llm -p hi && has "$TMP/err" "llm-run: /nonexistent/m.llm: "
}
t_run_prompt_too_long_exits_1() {
    r_stories
    expect 1 "$RUN" -m "$TMP/s.llm" --ctx 16 -p "Once upon a time there was a little girl named Lily who loved to play outside" &&
    has "$TMP/err" "more than the context of 16" && [ ! -s "$TMP/out" ] &&
    expect 0 "$RUN" -m "$TMP/s.llm" --ctx 16 --truncate --temp 0 -n 4 -v \
        -p "Once upon a time there was a little girl named Lily who loved to play outside" &&
    has "$TMP/err" "prompt: 9 tokens"
}
t_run_llama2c_without_tokenizer_exits_1() {
    need "$R_L2C"
    expect 1 "$RUN" -m "$R_L2C" -p hi && has "$TMP/err" "no tokenizer"
}

# ---- generation --------------------------------------------------------------
t_run_stories_llama2c_matches_run_c() {
    r_stories && need "$R_EXP"
    expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 200 --temp 0 && cmp "$TMP/out" "$R_EXP"
}
t_run_stories_gguf_matches_run_c() {
    need "$R_G260" "$R_EXP"
    expect 0 "$RUN" -m "$R_G260" -p '' -n 200 --temp 0 -t 2 --kv-type f32 && cmp "$TMP/out" "$R_EXP"
}
t_run_stories_checkpoint_directly() {
    need "$R_L2C" "$R_TOK" "$R_EXP"
    expect 0 "$RUN" -m "$R_L2C" --tokenizer "$R_TOK" -p '' -n 200 --temp 0 && cmp "$TMP/out" "$R_EXP"
}
# ---- speculative decoding (--draft, --lookup) --------------------------------
# Greedy: llama2.c's expected text, through a draft model and through lookup.
t_run_spec_greedy_matches_run_c() {
    need "$R_G260" "$R_EXP"
    expect 0 "$RUN" -m "$R_G260" -p '' -n 200 --temp 0 -t 1 --draft "$R_G260" -v &&
        cmp "$TMP/out" "$R_EXP" && has "$TMP/err" "speculation: " &&
        expect 0 "$RUN" -m "$R_G260" -p '' -n 200 --temp 0 -t 1 --lookup --draft-n 5 &&
        cmp "$TMP/out" "$R_EXP"
}
# Sampled, under the default match rule: plain decoding's text for the seed,
# with a draft that disagrees (SmolLM2 at 4 bits drafting for its q8_0).
t_run_spec_sampled_smollm2_is_plain_text() {
    r_smol || return 1
    [ -e "$TMP/smol-q8.llm" ] || "$BIN/llm-convert" -q "$R_SMOL" -t q8_0 -o "$TMP/smol-q8.llm" || return 1
    local p='Write a haiku about the sea.' o n
    for o in "--temp 0" "--temp 0.9 --seed 4 --repeat-penalty 1.1"; do
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/smol-q8.llm" --chat -p "$p" -n 48 -t 2 $o && mv "$TMP/out" "$TMP/plain" || return 1
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/smol-q8.llm" --chat -p "$p" -n 48 -t 2 $o -v --draft "$TMP/smol.llm" --draft-n 3 &&
            cmp "$TMP/plain" "$TMP/out" || return 1
        # some drafts kept, some not, and fewer target passes than tokens
        n=$(sed -nE 's/.*speculation: ([0-9]+) drafted, ([0-9]+) accepted .*, ([0-9]+) target passes for ([0-9]+) tokens.*/\1 \2 \3 \4/p' "$TMP/err")
        # shellcheck disable=SC2086
        set -- $n
        [ $# = 4 ] && [ "$2" -gt 0 ] && [ "$2" -lt "$1" ] && [ "$3" -lt "$4" ] ||
            { echo "speculation counters: '$n'"; return 1; }
    done
}
# Every sampler option, a stop string and the per-token log-probabilities:
# the same JSON with a draft (timings aside) as without.
t_run_spec_every_sampler_option_same_json() {
    need "$R_G260"
    local o="-p Once --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1
             --presence-penalty 0.2 --frequency-penalty 0.1 --repeat-last-n 16 -s 3
             --top-logprobs 3 --stop dog -n 60 -t 1 --json"
    # shellcheck disable=SC2086
    expect 0 "$RUN" -m "$R_G260" $o && sed 's/"timings.*"tokens"/"tokens"/' "$TMP/out" >"$TMP/plain" &&
        has "$TMP/plain" '"top_logprobs":[{' || return 1
    # shellcheck disable=SC2086
    expect 0 "$RUN" -m "$R_G260" $o --draft "$R_G260" --draft-n 3 &&
        sed 's/"timings.*"tokens"/"tokens"/' "$TMP/out" | cmp - "$TMP/plain" || return 1
    # shellcheck disable=SC2086
    expect 0 "$RUN" -m "$R_G260" $o --lookup &&
        sed 's/"timings.*"tokens"/"tokens"/' "$TMP/out" | cmp - "$TMP/plain"
}
# The draft is the target: every draft is kept, a round yields 4 drafts and
# the bonus (5 tokens a target pass), 64 tokens take 13 passes.
t_run_spec_json_counters() {
    need "$R_G260"
    expect 0 "$RUN" -m "$R_G260" -p 'Once upon a time' -n 64 --temp 0 -t 1 --draft "$R_G260" --draft-n 4 --json &&
        has "$TMP/out" '"speculation":{"drafted":51,"accepted":51,"acceptance_rate":1.0000,"draft_rounds":13,"mean_accepted_length":3.923,"target_passes":13,'
}
t_run_spec_vocabulary_mismatch_exits_1() {
    need "$R_G260" "$DATA/gguf/llama-2-tiny-random.gguf"
    expect 1 "$RUN" -m "$R_G260" -p hi -n 4 --draft "$DATA/gguf/llama-2-tiny-random.gguf" &&
        has "$TMP/err" "the draft's vocabulary has 32000 tokens, the target's" &&
        has "$TMP/err" "512" && [ "$(wc -l <"$TMP/err")" = 1 ] && [ ! -s "$TMP/out" ]
}
t_run_spec_usage_errors_exit_2() {
    expect 2 "$RUN" -m x --draft y --lookup && has "$TMP/err" "use one" &&
    expect 2 "$RUN" -m x --ngram-max 3 && has "$TMP/err" "go with --lookup" &&
    expect 2 "$RUN" -m x --draft-n 3 && has "$TMP/err" "go with --draft or --lookup" &&
    expect 2 "$RUN" -m x --lookup --draft-n 3 --draft-max 8 &&
    expect 2 "$RUN" -m x --lookup --ngram-min 4 --ngram-max 2 && has "$TMP/err" "above --ngram-max" &&
    expect 2 "$RUN" -m x --lookup --spec-rule maybe && has "$TMP/err" "not match or rejection" &&
    expect 2 "$RUN" -m x --lookup --n-seq 2 && has "$TMP/err" "--lookup does not go with --n-seq" &&
    expect 2 "$RUN" -m x --batch y --role prefill --draft z && has "$TMP/err" "--draft does not go with --role prefill" &&
    expect 2 "$RUN" -m x --draft y --tokenize && expect 2 "$RUN" -m x --lookup --draft-n 0
}

# ---- constrained decoding (--grammar, --json-schema, --regex, --json-object) ---
G_DIR=$ROOT/tests/cli/grammar
t_run_grammar_errors_one_line() {
    r_stories
    printf 'root ::= "a" b\nb ::= [x-' >"$TMP/bad.gbnf"
    expect 1 "$RUN" -m "$TMP/s.llm" -p hi -n 4 --grammar "$TMP/bad.gbnf" && one_line &&
        has "$TMP/err" "$TMP/bad.gbnf:2:7: expected ']' to end the class" && [ ! -s "$TMP/out" ] || return 1
    printf 'root ::= x\n' >"$TMP/bad.gbnf"
    expect 1 "$RUN" -m "$TMP/s.llm" -p hi --grammar "$TMP/bad.gbnf" && one_line &&
        has "$TMP/err" "bad.gbnf:1:10: undefined rule 'x'" || return 1
    echo '{"type": "object", "properties": {"a": {"not": {"type": "null"}}}}' >"$TMP/s.json"
    expect 1 "$RUN" -m "$TMP/s.llm" -p hi --json-schema "$TMP/s.json" && one_line &&
        has "$TMP/err" "s.json: #/properties/a: 'not' cannot be enforced" || return 1
    expect 1 "$RUN" -m "$TMP/s.llm" -p hi --regex '(a)\1' && one_line &&
        has "$TMP/err" "--regex: at offset 3 of the expression: back-references cannot be enforced" || return 1
    expect 1 "$RUN" -m "$TMP/s.llm" -p hi --grammar "$TMP/absent.gbnf" && one_line &&
        has "$TMP/err" "absent.gbnf" || return 1
    expect 2 "$RUN" -m "$TMP/s.llm" -p hi --grammar "$TMP/bad.gbnf" --json-object && has "$TMP/err" "use one" &&
        expect 2 "$RUN" -m "$TMP/s.llm" --batch x --regex a && has "$TMP/err" "response_format"
}
# A grammar that takes any text changes nothing: the same bits, greedy or
# sampled, on SentencePiece and byte-level vocabularies.
t_run_grammar_accept_all_is_plain() {
    r_stories
    printf 'root ::= .*\n' >"$TMP/all.gbnf"
    local o
    for o in "--temp 0" "--temp 1 -s 7 --top-k 0 --top-p 1 --min-p 0"; do
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/s.llm" -p 'Once upon a time' -n 120 -t 1 $o && mv "$TMP/out" "$TMP/plain" &&
            expect 0 "$RUN" -m "$TMP/s.llm" -p 'Once upon a time' -n 120 -t 1 $o --grammar "$TMP/all.gbnf" &&
            cmp "$TMP/plain" "$TMP/out" || return 1
    done
    r_smol || return 0
    expect 0 "$RUN" -m "$TMP/smol.llm" --chat -p 'Name three rivers.' -n 40 -t 2 --temp 0.8 -s 3 && mv "$TMP/out" "$TMP/plain" &&
        expect 0 "$RUN" -m "$TMP/smol.llm" --chat -p 'Name three rivers.' -n 40 -t 2 --temp 0.8 -s 3 --grammar "$TMP/all.gbnf" &&
        cmp "$TMP/plain" "$TMP/out"
}
# 100 sampled generations under a nested schema, each ended by the model,
# all valid (checked by a validator that shares no code with llm-run).
t_run_grammar_schema_100_samples_validate() {
    r_stories
    command -v python3 >/dev/null || skip "no python3"
    local s
    for s in $(seq 1 100); do
        "$RUN" -m "$TMP/s.llm" -p 'Once upon a time' --json-schema "$G_DIR/pet.schema.json" --temp 1 -s "$s" \
            -n 500 -t 1 --json >"$TMP/o.json" || return 1
        python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o["stop_reason"] == "eos", o; print(json.dumps(o["text"]))' \
            "$TMP/o.json" >>"$TMP/texts" || return 1
    done
    python3 "$G_DIR/validate.py" "$G_DIR/pet.schema.json" "$TMP/texts" >"$TMP/v" && has "$TMP/v" "100 valid"
}
# JSON that parses, text that matches the expression, and the shipped
# grammars, on SmolLM2.
t_run_grammar_smollm2_json_regex_shipped() {
    r_smol
    command -v python3 >/dev/null || skip "no python3"
    local s
    for s in 1 2 3; do
        expect 0 "$RUN" -m "$TMP/smol.llm" --chat -p 'Describe a city as JSON.' --json-object --temp 0.9 -s $s \
            -n 300 -t 2 -v && has "$TMP/err" "stop: eos" && has "$TMP/err" "grammar: compiled" &&
            python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$TMP/out" || return 1
    done
    local re='(Yes|No), [a-z]+( [a-z]+){1,6}\.'
    expect 0 "$RUN" -m "$TMP/smol.llm" --chat -p 'Is the sea salty? Answer in a sentence.' --regex "$re" -n 40 \
        --temp 0.7 -s 2 -t 2 && grep -qxE "$re" "$TMP/out" || { cat "$TMP/out"; return 1; }
    expect 0 "$RUN" -m "$TMP/smol.llm" --chat -p 'List three fruits.' --grammar "$ROOT/grammars/list.gbnf" -n 60 \
        --temp 0 -t 2 && [ "$(grep -c '^- ' "$TMP/out")" -ge 1 ] && ! grep -qv '^- ' "$TMP/out" || return 1
    expect 0 "$RUN" -m "$TMP/smol.llm" --chat -p 'Write SQL for the names of users older than 30.' \
        --grammar "$ROOT/grammars/sql-select.gbnf" -n 60 --temp 0 -t 2 && grep -qE '^SELECT .+ FROM [a-z_]+' "$TMP/out" || return 1
    local g
    for g in "$ROOT"/grammars/*.gbnf; do
        expect 0 "$RUN" -m "$TMP/smol.llm" -p 'x' --grammar "$g" -n 8 -t 2 || return 1
    done
}
# Completions of one prompt under a grammar, in a KV pool so small that they
# are preempted and recomputed (forced tokens decoded together included):
# each is the text of a single run with its seed.
t_run_grammar_nseq_preempted_same_as_alone() {
    r_stories
    command -v python3 >/dev/null || skip "no python3"
    local o="-p Once --json-schema $G_DIR/pet.schema.json --temp 1 -n 300 -t 1 --json" i
    # shellcheck disable=SC2086
    expect 0 "$RUN" -m "$TMP/s.llm" $o -s 10 --n-seq 4 --kv-blocks 20 --ctx 320 -v &&
        has "$TMP/err" "tokens forced" || return 1
    python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert sum(c["preemptions"] for c in o["completions"]) > 0, "no preemption"; [print(json.dumps(c["text"])) for c in o["completions"]]' \
        "$TMP/out" >"$TMP/n4" || return 1
    for i in 0 1 2 3; do
        # shellcheck disable=SC2086
        "$RUN" -m "$TMP/s.llm" $o -s $((10 + i)) | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["text"]))'
    done >"$TMP/n1" && cmp "$TMP/n4" "$TMP/n1"
}
# Speculation under a grammar: the drafts follow the grammar, the model's
# picks are masked, and the text is plain decoding's (match rule), greedy
# and sampled, with a draft model and with lookup; the rejection rule's
# texts validate.
t_run_grammar_speculation_is_plain() {
    r_stories
    command -v python3 >/dev/null || skip "no python3"
    local o sp base="-p Once --json-schema $G_DIR/pet.schema.json -n 500 -t 1"
    for o in "--temp 0" "--temp 1 -s 5" "--temp 0.8 -s 9 --top-k 20"; do
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/s.llm" $base $o && mv "$TMP/out" "$TMP/plain" || return 1
        for sp in "--draft $TMP/s.llm --draft-n 3" "--lookup"; do
            # shellcheck disable=SC2086
            expect 0 "$RUN" -m "$TMP/s.llm" $base $o $sp -v && has "$TMP/err" "speculation: " &&
                cmp "$TMP/plain" "$TMP/out" || return 1
        done
    done
    local s
    for s in 1 2 3 4; do
        # shellcheck disable=SC2086
        "$RUN" -m "$TMP/s.llm" $base --temp 1 -s $s --draft "$TMP/s.llm" --spec-rule rejection --json |
            python3 -c 'import json,sys; o=json.load(sys.stdin); assert o["stop_reason"] == "eos", o; print(json.dumps(o["text"]))' || return 1
    done >"$TMP/texts" && python3 "$G_DIR/validate.py" "$G_DIR/pet.schema.json" "$TMP/texts" >"$TMP/v" &&
        has "$TMP/v" "4 valid"
}
# Each request of a batch under its own response_format, and the bad ones
# answered with an error record.
t_run_grammar_batch_per_request() {
    r_stories
    command -v python3 >/dev/null || skip "no python3"
    local schema
    schema=$(tr -d '\n' <"$G_DIR/pet.schema.json")
    {
        echo '{"custom_id":"j","body":{"prompt":"Once upon a time","max_tokens":400,"temperature":1,"seed":3,"response_format":{"type":"json_object"}}}'
        echo '{"custom_id":"s","body":{"prompt":"Lily saw","max_tokens":500,"temperature":1,"seed":4,"n":2,"response_format":{"type":"json_schema","json_schema":{"name":"pet","strict":true,"schema":'"$schema"'}}}}'
        echo '{"custom_id":"p","body":{"prompt":"Once upon a time","max_tokens":30,"temperature":0}}'
        echo '{"custom_id":"bad","body":{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","format":"email"}}}}}'
        echo '{"custom_id":"t","body":{"prompt":"x","response_format":{"type":"yaml"}}}'
    } >"$TMP/req.jsonl"
    expect 3 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" -o "$TMP/b.jsonl" --max-seqs 4 &&
        has "$TMP/err" "5 requests: 3 answered, 2 errors" || return 1
    python3 - "$TMP/b.jsonl" "$G_DIR/pet.schema.json" "$TMP/schema-texts" <<'PY' || return 1
import json, sys
out = {}
for l in open(sys.argv[1]):
    o = json.loads(l)
    out[o["custom_id"]] = o
with open(sys.argv[3], "w") as f:
    for c in out["s"]["response"]["body"]["choices"]:
        assert c["finish_reason"] == "stop", c
        f.write(json.dumps(c["text"]) + "\n")
j = out["j"]["response"]["body"]["choices"][0]
assert j["finish_reason"] == "stop", j
json.loads(j["text"])
assert out["bad"]["error"]["code"] == "unsupported", out["bad"]
assert "format 'email' cannot be enforced" in out["bad"]["error"]["message"], out["bad"]
assert out["t"]["error"]["code"] == "invalid_request", out["t"]
PY
    python3 "$G_DIR/validate.py" "$G_DIR/pet.schema.json" "$TMP/schema-texts" >"$TMP/v" && has "$TMP/v" "2 valid" || return 1
    # a choice under a grammar is the text of a single run with its seed
    "$RUN" -m "$TMP/s.llm" -p 'Lily saw' -n 500 --temp 1 -s 5 --json-schema "$G_DIR/pet.schema.json" -t 1 --json |
        python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["text"]))' >"$TMP/single-s" &&
        sed -n 2p "$TMP/schema-texts" | cmp - "$TMP/single-s" || return 1
    # the plain request's text is the single run's
    "$RUN" -m "$TMP/s.llm" -p 'Once upon a time' -n 30 --temp 0 >"$TMP/single" &&
        python3 -c 'import json,sys; [print(json.loads(l)["response"]["body"]["choices"][0]["text"], end="") for l in open(sys.argv[1]) if json.loads(l)["custom_id"] == "p"]' "$TMP/b.jsonl" |
        cmp - "$TMP/single"
}

# ---- several completions (--n-seq) -------------------------------------------
# The output that --n-seq N gives, built from N single runs with seeds S..S+N-1
# (their text, and the token count and stop reason -v reports).
n_seq_expected() {
    local n=$1 seed=$2 k=0; shift 2
    while [ $k -lt "$n" ]; do
        "$RUN" "$@" --seed $((seed + k)) -v >"$TMP/one" 2>"$TMP/one.err" || return 1
        local toks stop
        toks=$(sed -n 's/.*generation: \([0-9]*\) tokens.*/\1/p' "$TMP/one.err")
        stop=$(sed -n 's/.*; stop: \([a-z]*\);.*/\1/p' "$TMP/one.err")
        [ $k = 0 ] || echo
        echo "--- completion $((k + 1)) of $n (seed $((seed + k)), $toks tokens, $stop) ---"
        cat "$TMP/one"; echo
        k=$((k + 1))
    done
}
t_run_n_seq_completions_are_the_single_runs_of_their_seeds() {
    r_stories
    local args="-m $TMP/s.llm -p Once -n 60 --temp 1.0 --top-k 0 --top-p 1 --min-p 0"
    # shellcheck disable=SC2086
    n_seq_expected 4 42 $args >"$TMP/want" || return 1
    # shellcheck disable=SC2086
    expect 0 "$RUN" $args --seed 42 --n-seq 4 && cmp "$TMP/out" "$TMP/want" || return 1
    # the four differ (they are samples, not copies)
    [ "$(grep -c '^--- completion' "$TMP/out")" = 4 ] &&
    [ "$(sed -n '2p;5p;8p;11p' "$TMP/out" | sort -u | wc -l)" -gt 1 ]
}
t_run_n_seq_greedy_completions_are_llama2c_text() {
    r_stories && need "$R_EXP"
    expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 200 --temp 0 --n-seq 3 --block-size 4 || return 1
    local k=1
    while [ $k -le 3 ]; do
        awk -v k=$k '/^--- completion /{i++; next} i == k' "$TMP/out" | head -c "$(wc -c <"$R_EXP")" >"$TMP/c$k"
        cmp "$TMP/c$k" "$R_EXP" || { echo "completion $k"; return 1; }
        k=$((k + 1))
    done
}
t_run_n_seq_preempted_completions_are_unchanged() {
    r_stories
    # 4 completions of 100 tokens need 4 x 7 blocks of 16; the pool has 12:
    # the latest are preempted, then recomputed, and write the same text
    local args="-m $TMP/s.llm -p Once -n 100 --temp 0.9 --seed 3 --n-seq 4 --ignore-eos"
    # shellcheck disable=SC2086
    expect 0 "$RUN" $args && mv "$TMP/out" "$TMP/free" &&
    # shellcheck disable=SC2086
    expect 0 "$RUN" $args --kv-blocks 12 && cmp "$TMP/out" "$TMP/free" &&
    # shellcheck disable=SC2086
    expect 0 "$RUN" $args --kv-blocks 12 --json && grep -q '"preemptions":[1-9]' "$TMP/out" &&
    has "$TMP/out" '"kv_blocks":12,' && has "$TMP/out" '"kv_blocks_peak":12,'
}
t_run_kv_budget_too_small_exits_1() {
    r_stories
    expect 1 "$RUN" -m "$TMP/s.llm" -p Once -n 100 --temp 0 --ignore-eos --kv-blocks 2 &&
    has "$TMP/err" "llm-run: KV cache full" && [ "$(wc -l <"$TMP/err")" = 1 ] &&
    expect 1 "$RUN" -m "$TMP/s.llm" -p Once -n 100 --temp 0 --n-seq 2 --kv-mem 1K &&
    has "$TMP/err" "holds no block"
}
t_run_n_seq_json_and_memory() {
    r_stories
    expect 0 "$RUN" -m "$TMP/s.llm" -p Once -n 8 --temp 0 --n-seq 2 --json --top-logprobs 2 &&
    has "$TMP/out" '"completions":[{"index":0,' && has "$TMP/out" '{"index":1,"seed":' &&
    has "$TMP/out" '"top_logprobs":[' && has "$TMP/out" '"kv_block_tokens":16,' || return 1
    # the prompt's block is shared: 2 completions of 9 tokens hold 2 blocks + the prompt's copy
    has "$TMP/out" '"kv_blocks_peak":3,' || return 1
    # 40 tokens of 3 alternatives each (the arrays grew past their first size out of step
    # with each other, and wrote past their end: seen under ASan)
    expect 0 "$RUN" -m "$TMP/s.llm" -p Once -n 40 --temp 0 --json --top-logprobs 3 --ignore-eos &&
    [ "$(grep -o '"top_logprobs":\[' "$TMP/out" | wc -l)" = 40 ]
}
t_run_n_seq_bad_values_exit_2() {
    expect 2 "$RUN" -m x --n-seq 0 && expect 2 "$RUN" -m x --kv-mem 0 &&
    expect 2 "$RUN" -m x --kv-mem 1M --kv-blocks 4 && has "$TMP/err" "use one" &&
    expect 2 "$RUN" -m x --tokenize --n-seq 2 && expect 2 "$RUN" -m x --block-size 0
}

t_run_echo_json_verbose() {
    r_stories && need "$R_EXP"
    expect 0 "$RUN" -m "$TMP/s.llm" -p 'Once upon a time' -n 20 --temp 0 --echo || return 1
    grep -q '^Once upon a time, there was a little girl named Lily' "$TMP/out" || { head -3 "$TMP/out"; return 1; }
    expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 200 --temp 0 --json -v || return 1
    has "$TMP/out" '"generated_tokens":200' && has "$TMP/out" '"stop_reason":"length"' &&
    has "$TMP/out" '"text":"Once upon a time, there was a little girl named Lily.' &&
    has "$TMP/err" "generation: 200 tokens" && has "$TMP/err" "tokens/s"
    command -v jq >/dev/null || return 0
    jq -j .text "$TMP/out" | cmp - "$R_EXP"
}
t_run_seed_reproducible() {
    r_stories
    "$RUN" -m "$TMP/s.llm" -p 'Once' -n 40 --seed 5 >"$TMP/a" &&
    "$RUN" -m "$TMP/s.llm" -p 'Once' -n 40 --seed 5 >"$TMP/b" &&
    "$RUN" -m "$TMP/s.llm" -p 'Once' -n 40 --seed 6 --temp 1.5 --top-k 0 --min-p 0 >"$TMP/c" &&
    cmp "$TMP/a" "$TMP/b" && ! cmp -s "$TMP/a" "$TMP/c"
}
t_run_stop_string() {
    r_stories
    expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 200 --temp 0 --stop 'red ball' --json || return 1
    has "$TMP/out" '"text":"Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, ",' &&
    has "$TMP/out" '"stop_reason":"stop"'
}
t_run_top_logprobs() {
    r_stories
    expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 3 --temp 0 --top-logprobs 2 --json || return 1
    has "$TMP/out" '"tokens":[{"id":' && has "$TMP/out" '"top_logprobs":[{"id":'
    expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 3 --temp 0 --top-logprobs 2 && [ "$(wc -l <"$TMP/err")" = 3 ]
}
t_run_prompt_from_stdin_and_file() {
    r_stories
    printf 'Once upon a time' >"$TMP/p.txt"
    "$RUN" -m "$TMP/s.llm" -p 'Once upon a time' -n 10 --temp 0 >"$TMP/a" &&
    "$RUN" -m "$TMP/s.llm" -f "$TMP/p.txt" -n 10 --temp 0 >"$TMP/b" &&
    "$RUN" -m "$TMP/s.llm" -n 10 --temp 0 <"$TMP/p.txt" >"$TMP/c" &&
    cmp "$TMP/a" "$TMP/b" && cmp "$TMP/a" "$TMP/c" && [ -s "$TMP/a" ]
}

# ---- tokenizer modes ---------------------------------------------------------
t_run_tokenize_detokenize_round_trip() {
    r_stories
    printf 'Lily saw a big red ball.' >"$TMP/t.txt"
    expect 0 "$RUN" -m "$TMP/s.llm" --tokenize -f "$TMP/t.txt" || return 1
    grep -Eq '^1( [0-9]+)+$' "$TMP/out" || { cat "$TMP/out"; return 1; }
    cp "$TMP/out" "$TMP/ids"
    expect 0 "$RUN" -m "$TMP/s.llm" --detokenize -f "$TMP/ids" &&
    [ "$(cat "$TMP/out")" = "Lily saw a big red ball." ] || { cat "$TMP/out"; return 1; }
    expect 0 "$RUN" -m "$TMP/s.llm" --tokenize --no-bos --json -p 'Lily' &&
    has "$TMP/out" '"ids":[' && has "$TMP/out" '"pieces":["' && ! grep -q '"ids":\[1,' "$TMP/out"
}
t_run_tokenize_vocab_only_file() {
    local v=$DATA/vocab/ggml-vocab-gpt-2.gguf
    need "$v"
    "$BIN/llm-convert" "$v" -o "$TMP/v.llm" || return 1
    expect 0 "$RUN" -m "$TMP/v.llm" --tokenize --no-bos -p 'Hello world' &&
    [ "$(cat "$TMP/out")" = "15496 995" ] || { cat "$TMP/out"; return 1; }
    expect 0 "$RUN" -m "$TMP/v.llm" --detokenize -p '15496,995' && [ "$(cat "$TMP/out")" = "Hello world" ] &&
    expect 1 "$RUN" -m "$TMP/v.llm" --detokenize -p '99999999' &&
    expect 1 "$RUN" -m "$TMP/v.llm" -p 'Hello' && has "$TMP/err" "tokenizer only"
}

# ---- SmolLM2 -------------------------------------------------------------------
# llama.cpp b4748 (llama-cli -no-cnv --temp 0 -t 1, /work/peer/REFERENCE.md) on the same GGUF:
# its first 32 tokens for this prompt. (Of its three reference prompts this one agrees for
# all 32 tokens; the other two part at near ties, where llama.cpp's int8 activations and
# our float ones round differently.)
t_run_smollm2_greedy_matches_llama_cpp() {
    r_smol
    expect 0 "$RUN" -m "$TMP/smol.llm" -p 'Once upon a time' --temp 0 -n 32 -t 2 &&
    printf ', the city of Nova Haven was a thriving metropolis, with towering skyscrapers and bustling streets. But as the years went by, the city began to lose its original' |
        cmp - "$TMP/out"
}
t_run_smollm2_chat_stops_at_im_end() {
    r_smol
    expect 0 "$RUN" -m "$TMP/smol.llm" --chat -p 'Write one sentence about cats.' --temp 0 -n 100 -t 2 --json &&
    has "$TMP/out" '"stop_reason":"eos"' && has "$TMP/out" '"text":"A cat is ' && ! has "$TMP/out" 'im_end' 2>/dev/null
    expect 0 "$RUN" -m "$TMP/smol.llm" --chat --system 'Be brief.' -p 'Hi' --echo -n 1 --temp 0 &&
    has "$TMP/out" '<|im_start|>system' && has "$TMP/out" 'Be brief.<|im_end|>' && has "$TMP/out" '<|im_start|>assistant'
}
t_run_sigint_stops_cleanly() {
    r_smol
    # its own output file, removed first (other tests leave this text in $TMP/out)
    rm -f "$TMP/sigint2.out"
    "$RUN" -m "$TMP/smol.llm" -p 'Once upon a time' --ignore-eos -n 100000 --temp 0 -t 1 \
        >"$TMP/sigint2.out" 2>"$TMP/err" &
    local pid=$! i
    # interrupt only once generation has started (a sanitizer build loads slowly)
    for i in $(seq 1200); do
        grep -q '^, the city of Nova Haven' "$TMP/sigint2.out" 2>/dev/null && break
        sleep 0.1
    done
    kill -INT $pid
    wait $pid
    local rc=$?
    [ $rc = 130 ] || { echo "exit $rc, expected 130"; cat "$TMP/err"; return 1; }
    has "$TMP/err" "llm-run: interrupted" && grep -q '^, the city of Nova Haven' "$TMP/sigint2.out"
}

# ---- SmolLM2 near-ties with llama.cpp ----------------------------------------
# llama.cpp quantizes activations to int8 before its Q4_1 dot products; we keep
# int16. Where the top two candidates are nearly tied that rounding can flip
# the greedy choice, after which the two texts part. The golden files hold
# llama.cpp b4748's 32 tokens and the step where we first part from it. The
# test: our tokens equal llama.cpp's before that step; at the first difference
# (that step or later) our top two are our token and llama.cpp's, with
# log-probabilities within R_TIE nats. The tolerance: observed gaps are 0.218
# (France, step 6) and 0.130 (fibonacci, step 14); llama.cpp's own gaps there
# are 0.330 and 0.065 the other way; switching our activations to int8
# (LLM_MATMUL_ACT=q8) moves the top-two gap by up to 0.44 nats on these
# prompts (0.08-0.14 on average) and flips both steps to llama.cpp's token.
# A median greedy step has a gap of 1.4 nats, and 15% of steps one below 0.25.
R_TIE=0.25
r_near_tie() {
    local g=$ROOT/tests/cli/golden/llm-run/$1 prompt pids ids at
    r_smol && need "$g"
    prompt=$(sed -n 's/^prompt: //p' "$g")
    pids=$(sed -n 's/^prompt_ids: //p' "$g")
    ids=$(sed -n 's/^gen_ids: //p' "$g")
    at=$(sed -n 's/^diverge_at: //p' "$g")
    [ -n "$prompt" ] && [ -n "$ids" ] && [ -n "$at" ] || { echo "$g: incomplete"; return 1; }
    expect 0 "$RUN" -m "$TMP/smol.llm" --tokenize -p "$prompt" && [ "$(cat "$TMP/out")" = "$pids" ] ||
        { echo "prompt ids $(cat "$TMP/out"), llama.cpp $pids"; return 1; }
    expect 0 "$RUN" -m "$TMP/smol.llm" -p "$prompt" --temp 0 -n 32 -t 2 --top-logprobs 2 || return 1
    # stderr: one line per step, "id<TAB>piece<TAB>logprob<TAB>id:piece:lp<TAB>id:piece:lp"
    awk -F'\t' -v want="$ids" -v at="$at" -v tol="$R_TIE" '
        function id_of(f) { sub(/:.*/, "", f); return f + 0 }
        function lp_of(f) { sub(/.*:/, "", f); return f + 0 }
        BEGIN { n = split(want, w, " ") }
        {
            if ($1 + 0 == w[NR]) next
            if (NR < at) { printf "step %d: %s, llama.cpp %s (expected to agree before step %d)\n", NR, $1, w[NR], at; bad = 1; exit }
            a = id_of($4); b = id_of($5); gap = lp_of($4) - lp_of($5)
            if (a != $1 + 0 || b != w[NR]) { printf "step %d: top two %d %d, want ours %d then llama.cpp %d\n", NR, a, b, $1, w[NR]; bad = 1; exit }
            if (gap > tol) { printf "step %d: gap %.4f nats > %s: not a near-tie\n", NR, gap, tol; bad = 1; exit }
            parted = 1; exit
        }
        END { if (bad) exit 1; if (!parted && NR < n) { printf "%d steps, expected %d\n", NR, n; exit 1 } }
    ' "$TMP/err"
}
t_run_smollm2_france_near_tie() { r_near_tie smollm2-q4_1-france.txt; }
t_run_smollm2_fibonacci_near_tie() { r_near_tie smollm2-q4_1-fibonacci.txt; }

# ---- bad input, memory, Ctrl-C, interactive chat -------------------------------
t_run_corrupt_model_exits_1() {
    r_smol
    head -c 1000000 "$TMP/smol.llm" >"$TMP/cut.llm"
    expect 1 "$RUN" -m "$TMP/cut.llm" -p hi && has "$TMP/err" "llm-run: $TMP/cut.llm: " || return 1
    # four bytes changed inside a weight: only the checksums can tell
    cp "$TMP/smol.llm" "$TMP/flip.llm"
    printf '\377\377\377\377' | dd of="$TMP/flip.llm" bs=1 seek=60000000 conv=notrunc status=none
    expect 1 "$RUN" -m "$TMP/flip.llm" -p hi -n 1 &&
    has "$TMP/err" "llm-run: $TMP/flip.llm: tensor 'blk." && has "$TMP/err" "checksum mismatch" &&
    [ ! -s "$TMP/out" ] &&
    expect 0 "$RUN" -m "$TMP/flip.llm" -p hi -n 1 --no-verify &&
    expect 2 "$RUN" -m "$TMP/smol.llm" --tokenize --no-verify -p hi
}
t_run_kv_cache_too_small_exits_1() {
    r_smol
    # room for 8 - 4 + 1 = 5 tokens: -n 5 fits, -n 6 does not
    expect 0 "$RUN" -m "$TMP/smol.llm" -p 'Once upon a time' --ctx 8 -n 5 --temp 0 &&
    expect 1 "$RUN" -m "$TMP/smol.llm" -p 'Once upon a time' --ctx 8 -n 6 --temp 0 &&
    has "$TMP/err" "llm-run: the KV cache is full: the context of 8 tokens ended after 5 of the 6 tokens" &&
    [ "$(cat "$TMP/out")" = ", the city of Nova" ] || return 1
    # until EOS or a full context (-n -1): a full context is a normal end
    expect 0 "$RUN" -m "$TMP/smol.llm" -p 'Once upon a time' --ctx 8 --temp 0 --json &&
    has "$TMP/out" '"stop_reason":"context"' || return 1
    # 16M tokens x 30 layers x 3 KV heads x 64 x 2 x 2 bytes = 387 GB (a sanitizer
    # build must be told to return NULL rather than abort)
    expect 1 env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1" \
        "$RUN" -m "$TMP/smol.llm" -p hi --ctx 16777216 -n 1 &&
    has "$TMP/err" "no memory for the KV cache of 16777216 tokens (386.55 GB of f16)"
}
t_run_reports_peak_rss_and_kv_bytes() {
    r_smol
    expect 0 "$RUN" -m "$TMP/smol.llm" -p 'Once upon a time' -n 4 --temp 0 --ctx 256 --json -v || return 1
    # K and V: 30 layers x 3 KV heads x 64 x 256 tokens x 2 bytes each
    has "$TMP/out" '"kv_cache_bytes":5898240,' && has "$TMP/err" "(KV cache 5.9 MB)" || return 1
    # every weight is read, so the peak is at least the file, and not 2x it
    local rss size
    rss=$(sed -n 's/.*"peak_rss_bytes":\([0-9]*\).*/\1/p' "$TMP/out")
    size=$(wc -c <"$TMP/smol.llm")
    [ -n "$rss" ] && [ "$rss" -gt "$size" ] && [ "$rss" -lt $((2 * size)) ] ||
        { echo "peak RSS $rss, file $size"; return 1; }
    # the interleaved copy of the q4_1 matrices (70 of the 98 MB) replaces their pages of
    # the file: within 3% of the file of the row layout's peak (LLM_X16=0), not 70 MB above
    # (under ASan the copy's shadow memory and redzones, about 14 MB, come on top)
    local rows slack=$((size * 3 / 100))
    case $BIN in *build-san*) slack=$((slack + size / 4)) ;; esac
    expect 0 env LLM_X16=0 "$RUN" -m "$TMP/smol.llm" -p 'Once upon a time' -n 4 --temp 0 --ctx 256 --json || return 1
    rows=$(sed -n 's/.*"peak_rss_bytes":\([0-9]*\).*/\1/p' "$TMP/out")
    [ -n "$rows" ] && [ "$rss" -lt $((rows + slack)) ] ||
        { echo "peak RSS $rss interleaved, $rows in rows, file $size"; return 1; }
}
t_run_json_seed_reproduces_the_run() {
    r_stories
    command -v jq >/dev/null || skip "no jq"
    expect 0 "$RUN" -m "$TMP/s.llm" -p 'Once' -n 30 --temp 1.2 --json || return 1
    local seed text
    seed=$(jq -r .seed "$TMP/out") && text=$(jq -r .text "$TMP/out") || return 1
    expect 0 "$RUN" -m "$TMP/s.llm" -p 'Once' -n 30 --temp 1.2 --seed "$seed" --json &&
    [ "$(jq -r .text "$TMP/out")" = "$text" ] || { echo "seed $seed: '$text' then '$(jq -r .text "$TMP/out")'"; return 1; }
}
t_run_sigint_during_prefill() {
    r_smol && need "$DATA/text/wiki.test.raw"
    # about 2000 tokens: four slices of prefill, of which -v counts those done
    head -c 8200 "$DATA/text/wiki.test.raw" >"$TMP/long.txt"
    # a file of its own, removed first: the shell may test it before the
    # child's redirection has truncated a previous test's output
    rm -f "$TMP/sigint.out"
    "$RUN" -m "$TMP/smol.llm" -f "$TMP/long.txt" --ctx 2048 -n 10 --temp 0 -t 1 --echo -v \
        >"$TMP/sigint.out" 2>"$TMP/err" &
    local pid=$! i
    # the echoed prompt is written out before the prefill starts
    for i in $(seq 600); do
        [ -s "$TMP/sigint.out" ] && break
        sleep 0.1
    done
    kill -INT $pid
    wait $pid
    local rc=$?
    [ $rc = 130 ] || { echo "exit $rc, expected 130"; cat "$TMP/err"; return 1; }
    has "$TMP/err" "llm-run: interrupted" && head -c 8200 "$TMP/sigint.out" | cmp - "$TMP/long.txt" &&
    has "$TMP/err" "generation: 0 tokens" &&
    grep -Eq 'prompt: (512|1024|1536) tokens in' "$TMP/err" || { cat "$TMP/err"; return 1; }
}
t_run_chat_interactive_on_a_terminal() {
    r_smol
    command -v script >/dev/null || skip "no script(1) for a pseudo-terminal"
    # two user turns; the second only makes sense with the first in the context
    printf 'What is the capital of France?\nAnd of Italy?\n' |
        script -qfec "'$RUN' -m '$TMP/smol.llm' --chat --temp 0 -n 30 -t 2" /dev/null >"$TMP/out" 2>&1
    tr -d '\r' <"$TMP/out" >"$TMP/chat"
    grep -qx '> The capital of France is Paris.' "$TMP/chat" &&
    grep -qx '> The capital of Italy is Rome.' "$TMP/chat" || { cat "$TMP/chat"; return 1; }
}
t_run_sampler_options_take_effect() {
    r_stories && need "$R_EXP"
    # at a high temperature each truncation, pushed to its limit, leaves only
    # the best token: the greedy text
    local o
    for o in '--top-k 1' '--top-p 0.000001 --top-k 0' '--min-p 1 --top-k 0'; do
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 200 --temp 5 --seed 3 $o && cmp -s "$TMP/out" "$R_EXP" ||
            { echo "$o: not the greedy text"; return 1; }
    done
    # and the same temperature without them is not greedy
    expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 200 --temp 5 --seed 3 --top-k 0 --top-p 1 --min-p 0 &&
    ! cmp -s "$TMP/out" "$R_EXP" || return 1
    # each penalty changes the (repetitive) greedy text
    for o in '--repeat-penalty 1.3' '--presence-penalty 1' '--frequency-penalty 1'; do
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/s.llm" -p '' -n 200 --temp 0 $o && ! cmp -s "$TMP/out" "$R_EXP" ||
            { echo "$o: no effect"; return 1; }
    done
}

# ---- integrity (issue 17) ----------------------------------------------------
# NaN weights gave exit 0 and empty output, with no word.
t_run_nonfinite_weights_refused() {
    nan_llm || return 1
    expect 1 "$RUN" -m "$TMP/nan.llm" -p 'Once' -n 4 --temp 0 &&
    has "$TMP/err" "llm-run: $TMP/$NAN_MSG" && one_line && [ ! -s "$TMP/out" ] &&
    # the tokenizer modes do not read the weights
    expect 0 "$RUN" -m "$TMP/nan.llm" --tokenize -p 'Once'
}
t_run_device_model_stops_at_the_header() {
    expect 1 limited timeout 20 "$RUN" -m /dev/zero -p hi && has "$TMP/err" "llm-run: /dev/zero: " &&
    one_line
}
# A bad id quoted the rest of the input, newline included; the message
# names where the ids came from.
t_run_detokenize_bad_id_one_line() {
    r_stories
    expect 1 "$RUN" -m "$TMP/s.llm" --detokenize -p "$(printf '12 13 abc\ndef 14')" &&
    has "$TMP/err" "llm-run: -p: id 3, 'abc', is not a token id" && one_line || return 1
    printf '1 2\n3 4 x\001y 5\n' >"$TMP/ids.txt"
    expect 1 "$RUN" -m "$TMP/s.llm" --detokenize -f "$TMP/ids.txt" &&
    has "$TMP/err" "llm-run: $TMP/ids.txt: id 5, 'x?y', is not a token id" && one_line
}
# "the prompt is empty" did not name its file.
t_run_empty_prompt_names_its_file() {
    r_smol # no BOS: an empty text gives no token
    : >"$TMP/empty.txt"
    expect 1 "$RUN" -m "$TMP/smol.llm" -f "$TMP/empty.txt" -n 2 &&
    has "$TMP/err" "llm-run: $TMP/empty.txt: the prompt is empty" && one_line &&
    expect 1 "$RUN" -m "$TMP/smol.llm" -p '' -n 2 && has "$TMP/err" "llm-run: -p: the prompt is empty" &&
    expect 1 sh -c "'$RUN' -m '$TMP/smol.llm' -n 2 </dev/null" &&
    has "$TMP/err" "llm-run: <stdin>: the prompt is empty"
}
# A write error on stdout printed two lines.
t_run_stdout_write_error_one_line() {
    r_stories
    [ -w /dev/full ] || skip "no /dev/full"
    expect 1 sh -c "'$RUN' -m '$TMP/s.llm' -p Once -n 4 --temp 0 >/dev/full" &&
    has "$TMP/err" "llm-run: <stdout>: write error" && one_line &&
    expect 1 sh -c "'$RUN' -m '$TMP/s.llm' --tokenize -p Once >/dev/full" && one_line
}

# ---- --batch -----------------------------------------------------------------
# the text of each choice of each output line, one per line: "LINE CHOICE TEXT"
batch_texts() {
    python3 - "$1" <<'PY'
import json, sys
for l in open(sys.argv[1], encoding="utf-8"):
    o = json.loads(l)
    b = (o.get("response") or {}).get("body")
    n = int(o["id"].split("-")[1])
    if not b:
        print(n, "error", o["error"]["code"]); continue
    for c in b["choices"]:
        t = c.get("text", (c.get("message") or {}).get("content"))
        print(n, c["index"], json.dumps(t), c["finish_reason"])
PY
}
# request lines for stories260K: greedy, seeded, several choices, stops
batch_requests() {
    {
        echo '{"custom_id":"g1","url":"/v1/completions","body":{"prompt":"Once upon a time","max_tokens":30,"temperature":0}}'
        echo '{"custom_id":"s1","body":{"prompt":"Lily saw a big dog","max_tokens":25,"temperature":0.9,"seed":11}}'
        echo '{"custom_id":"s3","body":{"prompt":"The sun was hot","max_tokens":20,"temperature":1.0,"seed":5,"n":3}}'
        echo '{"custom_id":"st","body":{"prompt":"Tom had a red ball","max_tokens":40,"temperature":0,"stop":["."]}}'
        echo '{"prompt":"One day","max_tokens":12,"temperature":0}'
    } >"$TMP/req.jsonl"
}
# answers without their creation times, sorted: the same lines whatever the order
batch_strip() { sed -E 's/"created":[0-9]+,//' "$1" | sort; }
# the request set twice over (duplicate custom_ids), and its answers in $TMP/a.jsonl
batch_plain2() {
    r_stories && batch_requests && cat "$TMP/req.jsonl" "$TMP/req.jsonl" >"$TMP/req2.jsonl" &&
        expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req2.jsonl" -o "$TMP/a.jsonl"
}
# Every answer is the text of a single llm-run with the same seed.
t_run_batch_matches_single_runs() {
    r_stories
    command -v python3 >/dev/null || skip "no python3"
    batch_requests
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" -o "$TMP/b.jsonl" --max-seqs 4 || return 1
    [ ! -s "$TMP/out" ] && has "$TMP/err" "5 requests: 5 answered, 0 errors" || return 1
    batch_texts "$TMP/b.jsonl" >"$TMP/bt.txt"
    single() { # LINE CHOICE -- llm-run args
        local l=$1 c=$2; shift 3
        "$RUN" -m "$TMP/s.llm" --json "$@" |
            python3 -c 'import json,sys; o=json.load(sys.stdin); c=o.get("completions"); i=int(sys.argv[1]); t=c[i]["text"] if c else o["text"]; r=c[i]["stop_reason"] if c else o["stop_reason"]; print(sys.argv[2], i, json.dumps(t), "stop" if r in ("eos","stop") else "length")' "$c" "$l"
    }
    {
        single 1 0 -- -p "Once upon a time" -n 30 --temp 0
        single 2 0 -- -p "Lily saw a big dog" -n 25 --temp 0.9 -s 11
        for i in 0 1 2; do single 3 $i -- -p "The sun was hot" -n 20 --temp 1.0 -s 5 --n-seq 3; done
        single 4 0 -- -p "Tom had a red ball" -n 40 --temp 0 --stop .
        single 5 0 -- -p "One day" -n 12 --temp 0
    } >"$TMP/st.txt"
    diff "$TMP/st.txt" "$TMP/bt.txt" && [ "$(wc -l <"$TMP/bt.txt")" = 7 ]
}
# The same answers from stdin, in completion order, one sequence at a
# time with chunks of 3 tokens, without the prefix cache, and with a pool
# so small that requests are preempted.
t_run_batch_same_answers_every_schedule() {
    batch_plain2 || return 1
    expect 0 sh -c "'$RUN' -m '$TMP/s.llm' --batch - --completion-order --max-seqs 3 --step-tokens 3 --no-prefix-cache <'$TMP/req2.jsonl'" &&
    has "$TMP/err" '<stdin>: custom_id "g1" is used by more than one line' &&
    diff <(batch_strip "$TMP/a.jsonl") <(batch_strip "$TMP/out") || return 1
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req2.jsonl" --kv-blocks 8 --ctx 64 --max-seqs 6 \
        --stats-json "$TMP/stats.json" && has "$TMP/err" "10 answered" &&
    ! grep -q '"preemptions":0,' "$TMP/stats.json" &&
    diff <(batch_strip "$TMP/a.jsonl") <(batch_strip "$TMP/out")
}
# Bad lines of every kind: one output line for each input line (blank
# lines are not requests), an error record for each bad one, exit 3.
t_run_batch_bad_lines_one_output_each() {
    r_stories
    {
        echo '{"custom_id":"ok1","body":{"prompt":"Once","max_tokens":4,"temperature":0}}'
        echo 'this is not json'
        echo '[1,2,3]'
        echo ''
        echo '{"custom_id":"u","url":"/v1/embeddings","body":{"input":"x"}}'
        echo '{"custom_id":"t","body":{"prompt":"x","max_tokens":"ten"}}'
        echo '{"custom_id":"m","body":{"temperature":0}}'
        printf '{"custom_id":"long","body":{"prompt":"%s"}}\n' "$(printf 'Once upon a time %.0s' $(seq 40))"
        echo '{"custom_id":"n","body":{"prompt":"x","n":9}}'
        echo '{"custom_id":"ok1","body":{"prompt":"Tom","max_tokens":3,"temperature":0}}'
        printf '{"custom_id":"nul","body":{"prompt":"a\\u0000b","max_tokens":2}}\r\n'
        echo '{"custom_id":"stream","body":{"prompt":"x","stream":true}}'
        echo '   '
        echo '{"custom_id":"last","body":{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}}'
    } >"$TMP/bad.jsonl"
    expect 3 "$RUN" -m "$TMP/s.llm" --batch "$TMP/bad.jsonl" --ctx 64 --max-seqs 4 || return 1
    [ "$(wc -l <"$TMP/out")" = 12 ] || { echo "$(wc -l <"$TMP/out") output lines"; return 1; }
    local ids; ids=$(grep -o '^{"id":"line-[0-9]*"' "$TMP/out" | grep -o '[0-9]*' | tr '\n' ' ')
    [ "$ids" = "1 2 3 5 6 7 8 9 10 11 12 14 " ] || { echo "ids: $ids"; return 1; }
    for c in invalid_json invalid_request unsupported_url context_length_exceeded unsupported; do
        has "$TMP/out" "\"code\":\"$c\"" || return 1
    done
    has "$TMP/err" "custom_id \"ok1\" is used by more than one line" &&
    [ "$(grep -c '"status_code":200' "$TMP/out")" = 2 ] && has "$TMP/out" 'NUL character' && has "$TMP/out" 'no chat template' &&
    grep '"line-9"' "$TMP/out" | grep -q 'more than the 4 sequences'
}
# Interrupted (SIGTERM) and resumed, the output holds the same lines as an
# uninterrupted run; a killed run's half-written last line is redone.
t_run_batch_interrupt_and_resume() {
    r_stories
    batch_requests
    local i
    for i in $(seq 60); do
        echo "{\"custom_id\":\"c$i\",\"body\":{\"prompt\":\"Once upon a time $i\",\"max_tokens\":200,\"temperature\":0.8,\"seed\":$i}}"
    done >"$TMP/many.jsonl"
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/many.jsonl" -o "$TMP/full.jsonl" --max-seqs 2 -t 1 || return 1
    "$RUN" -m "$TMP/s.llm" --batch "$TMP/many.jsonl" -o "$TMP/part.jsonl" --max-seqs 2 -t 1 2>"$TMP/err" &
    local pid=$! n=0
    for i in $(seq 200); do
        n=$(cat "$TMP/part.jsonl" 2>/dev/null | wc -l)
        [ "$n" -ge 3 ] && break
        sleep 0.05
    done
    kill -TERM $pid; wait $pid; local rc=$?
    n=$(wc -l <"$TMP/part.jsonl")
    if [ $rc = 143 ]; then
        has "$TMP/err" "interrupted" && has "$TMP/err" "--resume" && [ "$n" -lt 60 ] || return 1
    else
        [ $rc = 0 ] || { echo "exit $rc"; return 1; } # it finished first: still compared
    fi
    printf '{"id":"line-' >>"$TMP/part.jsonl" # a line cut short by a kill
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/many.jsonl" -o "$TMP/part.jsonl" --resume \
        --max-seqs 2 -t 1 && has "$TMP/err" "answered before (--resume)" &&
    diff <(batch_strip "$TMP/full.jsonl") <(batch_strip "$TMP/part.jsonl") || return 1
    expect 1 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" -o "$TMP/part.jsonl" --resume &&
    has "$TMP/err" "not the same input" && one_line
}
# Speculation in a batch: every request's drafts are checked in the step's
# one pass, and each answer is the plain run's, byte for byte: by lookup,
# by the model as its own draft (greedy drafts, which sampled requests often
# refuse: the KV is cut back), in steps of 16 tokens with a pool so small
# that requests are preempted, and on the decode side of a role pipeline.
t_run_batch_spec_same_answers() {
    batch_plain2 || return 1
    local o
    for o in "--lookup --draft-n 3" "--draft $TMP/s.llm" "--draft $TMP/s.llm --draft-n 4"; do
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req2.jsonl" -o "$TMP/b.jsonl" $o \
            --stats-json "$TMP/st.json" && diff <(batch_strip "$TMP/a.jsonl") <(batch_strip "$TMP/b.jsonl") &&
            has "$TMP/err" "speculation: " && has "$TMP/st.json" '"speculation":{"drafted":' &&
            ! has "$TMP/st.json" '"speculation":{"drafted":0,' || { echo "with $o"; return 1; }
    done
    # the last draft kept some and refused some; fewer passes than tokens
    python3 - "$TMP/st.json" <<'PY' || return 1
import json, sys
s = json.load(open(sys.argv[1]))["speculation"]
assert 0 < s["accepted"] < s["drafted"], s
assert s["target_passes"] < s["tokens"] and s["passes_per_token"] < 1, s
PY
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req2.jsonl" -o "$TMP/b.jsonl" --draft "$TMP/s.llm" \
        --draft-n 4 --kv-blocks 6 --ctx 64 --max-seqs 6 --step-tokens 16 --stats-json "$TMP/st.json" &&
        ! grep -q '"preemptions":0,' "$TMP/st.json" && diff <(batch_strip "$TMP/a.jsonl") <(batch_strip "$TMP/b.jsonl") ||
        return 1
    expect 0 sh -c "'$RUN' -m '$TMP/s.llm' --batch '$TMP/req2.jsonl' --role prefill 2>/dev/null | '$RUN' -m '$TMP/s.llm' --role decode --lookup" &&
        diff <(batch_strip "$TMP/a.jsonl") <(batch_strip "$TMP/out")
}
# SmolLM2 q8_0 with its 4-bit self as the draft, which disagrees: chat and
# completion requests with every sampler option, log-probabilities, n = 2,
# a stop string and a JSON response_format give the plain run's lines.
t_run_batch_spec_smollm2_every_option() {
    r_smol || return 1
    [ -e "$TMP/smol-q8.llm" ] || "$BIN/llm-convert" -q "$R_SMOL" -t q8_0 -o "$TMP/smol-q8.llm" || return 1
    {
        echo '{"custom_id":"a","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Write a haiku about the sea."}],"max_tokens":40,"temperature":0}}'
        echo '{"custom_id":"b","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Rewrite in plain words: The quick brown fox jumps over the lazy dog, and the dog does not move."}],"max_tokens":40,"temperature":0.9,"seed":4,"top_k":20,"top_p":0.9,"min_p":0.02,"presence_penalty":0.2,"frequency_penalty":0.1,"logprobs":true,"top_logprobs":3}}'
        echo '{"custom_id":"c","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Give a JSON object with a name and an age."}],"max_tokens":40,"temperature":0.7,"seed":2,"n":2,"response_format":{"type":"json_object"}}}'
        echo '{"custom_id":"d","url":"/v1/completions","body":{"prompt":"The capital of France is","max_tokens":30,"temperature":1.0,"seed":9,"stop":["."]}}'
    } >"$TMP/sreq.jsonl"
    expect 0 "$RUN" -m "$TMP/smol-q8.llm" --batch "$TMP/sreq.jsonl" -o "$TMP/a.jsonl" -t 2 || return 1
    has "$TMP/a.jsonl" '"top_logprobs":[{' || return 1
    local o
    for o in "--draft $TMP/smol.llm --draft-n 3" "--lookup --draft-n 4"; do
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/smol-q8.llm" --batch "$TMP/sreq.jsonl" -o "$TMP/b.jsonl" -t 2 $o \
            --stats-json "$TMP/st.json" && diff <(batch_strip "$TMP/a.jsonl") <(batch_strip "$TMP/b.jsonl") ||
            { echo "with $o"; return 1; }
    done
    python3 - "$TMP/st.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["speculation"]
assert 0 < s["accepted"] < s["drafted"], s
PY
}
# Prefill and decode in two processes: `--role prefill | --role decode`
# answers the same lines as one process, through a pipe and through a
# compressed file read by a decode side so short of blocks that it preempts
# (the preempted are recomputed there); a bad line crosses as a line.
t_run_batch_role_pipeline_same_lines() {
    r_stories
    batch_requests
    echo 'not json' >>"$TMP/req.jsonl"
    echo '{"custom_id":"x2","body":{"prompt":"The cat","max_tokens":15,"temperature":0.7}}' >>"$TMP/req.jsonl"
    strip() { sed -E 's/"created":[0-9]+,//' "$1"; }
    expect 3 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" -o "$TMP/one.jsonl" --seed 9 || return 1
    expect 3 sh -c "'$RUN' -m '$TMP/s.llm' --batch '$TMP/req.jsonl' --role prefill 2>'$TMP/perr' | '$RUN' -m '$TMP/s.llm' --role decode --seed 9" &&
    has "$TMP/perr" "6 prompts prefilled and sent, 1 lines sent without a state" &&
    has "$TMP/err" "6 answered (6 with their prompts' states), 1 errors" &&
    diff <(strip "$TMP/one.jsonl") <(strip "$TMP/out") || return 1
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" --role prefill --kv-compress -o "$TMP/st.bin" &&
    [ "$(head -c 8 "$TMP/st.bin")" = LLMSPLIT ] &&
    expect 3 "$RUN" -m "$TMP/s.llm" --role decode --batch "$TMP/st.bin" --seed 9 --kv-blocks 8 --ctx 64 \
        --max-seqs 6 --completion-order --stats-json "$TMP/stats.json" &&
    ! grep -q '"preemptions":0,' "$TMP/stats.json" &&
    diff <(strip "$TMP/one.jsonl" | sort) <(strip "$TMP/out" | sort)
}
# What the decode side refuses: another model or KV type (the whole
# stream, at once), a damaged state (that line's error record; the rest
# are answered), a damaged or cut stream (the lines before it are
# answered, then the reason), and input that is not a stream.
t_run_batch_role_refusals() {
    r_stories
    batch_requests
    command -v python3 >/dev/null || skip "no python3"
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" --role prefill -o "$TMP/st.bin" || return 1
    "$BIN/llm-convert" "$TMP/s.llm" -t f16 -o "$TMP/s16.llm" 2>/dev/null || return 1
    expect 1 "$RUN" -m "$TMP/s16.llm" --role decode --batch "$TMP/st.bin" &&
    has "$TMP/err" "computed by another model" && one_line && [ ! -s "$TMP/out" ] &&
    expect 1 "$RUN" -m "$TMP/s.llm" --role decode --batch "$TMP/st.bin" --kv-type bf16 &&
    has "$TMP/err" "the state holds f16 KV rows, this run's cache is bf16" && one_line &&
    expect 1 "$RUN" -m "$TMP/s.llm" --role decode --batch "$TMP/req.jsonl" &&
    has "$TMP/err" "not a handoff stream" && one_line || return 1
    python3 - "$TMP/st.bin" <<'PY' || return 1
import sys
b = open(sys.argv[1], 'rb').read()
states = [i for i in range(len(b)) if b.startswith(b'LLMSTATE', i)]
d = bytearray(b); d[states[2] + 400] ^= 0x20          # the KV rows of the third item's state
open(sys.argv[1] + '.state', 'wb').write(d)
items = [i for i in range(len(b)) if b.startswith(b'LLMSITEM', i)]
d = bytearray(b); d[items[3] + 40] ^= 0x01            # the fourth item's request line
open(sys.argv[1] + '.line', 'wb').write(d)
open(sys.argv[1] + '.cut', 'wb').write(b[:items[2] + 100])
PY
    expect 3 "$RUN" -m "$TMP/s.llm" --role decode --batch "$TMP/st.bin.state" --seed 1 &&
    [ "$(wc -l <"$TMP/out")" = 5 ] && [ "$(grep -c '"code":"invalid_state"' "$TMP/out")" = 1 ] &&
    has "$TMP/out" "the checksum does not match" &&
    expect 1 "$RUN" -m "$TMP/s.llm" --role decode --batch "$TMP/st.bin.line" --seed 1 &&
    has "$TMP/err" "the checksum does not match (a damaged stream)" && one_line &&
    [ "$(wc -l <"$TMP/out")" = 3 ] &&
    expect 1 "$RUN" -m "$TMP/s.llm" --role decode --batch "$TMP/st.bin.cut" --seed 1 &&
    has "$TMP/err" "cut short" && has "$TMP/err" "the 2 requests it held are answered" && one_line &&
    [ "$(wc -l <"$TMP/out")" = 2 ]
}
# An interrupted prefill side ends its stream without the end mark: the
# decode side answers what came and says so; both again, the decode side
# with --resume, give the lines of one uninterrupted run.
t_run_batch_role_interrupt_and_resume() {
    r_stories
    local i
    for i in $(seq 40); do
        echo "{\"custom_id\":\"c$i\",\"body\":{\"prompt\":\"Once upon a time $i\",\"max_tokens\":60,\"temperature\":0.8,\"seed\":$i}}"
    done >"$TMP/many.jsonl"
    # a decode side that never gets a stream does not create its output: no
    # older file of that name may be there for the resumed run to append to
    rm -f "$TMP/rpart.jsonl"
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/many.jsonl" -o "$TMP/full.jsonl" --max-seqs 2 -t 1 || return 1
    # a pipe, not a FIFO: a prefill side killed before it opens a FIFO would leave the decode
    # side waiting in open() for a writer, as any reader of a FIFO does
    { "$RUN" -m "$TMP/s.llm" --batch "$TMP/many.jsonl" --role prefill --step-tokens 1 --max-seqs 1 \
        -t 1 2>"$TMP/perr" & echo $! >"$TMP/ppid"; wait $!; echo $? >"$TMP/prc"; } |
        "$RUN" -m "$TMP/s.llm" --role decode -o "$TMP/rpart.jsonl" --max-seqs 2 -t 1 2>"$TMP/derr" &
    local dpid=$!
    for i in $(seq 200); do
        [ "$(cat "$TMP/rpart.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
        sleep 0.02
    done
    while [ ! -s "$TMP/ppid" ]; do sleep 0.01; done
    kill -TERM "$(cat "$TMP/ppid")" 2>/dev/null
    wait $dpid; local drc=$? prc; prc=$(cat "$TMP/prc")
    if [ "$prc" = 143 ]; then # (killed before it caught signals, while loading, it says nothing)
        { grep -q "interrupted" "$TMP/perr" || [ ! -s "$TMP/perr" ]; } && [ $drc = 1 ] &&
        { grep -q "cut short" "$TMP/derr" || grep -q "empty: no handoff stream" "$TMP/derr"; } || return 1
    else
        [ "$prc" = 0 ] && [ $drc = 0 ] || { echo "exits $prc $drc"; return 1; }
    fi
    expect 0 sh -c "'$RUN' -m '$TMP/s.llm' --batch '$TMP/many.jsonl' --role prefill 2>/dev/null | '$RUN' -m '$TMP/s.llm' --role decode -o '$TMP/rpart.jsonl' --resume --max-seqs 2 -t 1" &&
    diff <(batch_strip "$TMP/full.jsonl") <(batch_strip "$TMP/rpart.jsonl")
}
t_run_batch_role_usage() {
    r_stories
    batch_requests
    expect 2 "$RUN" -m "$TMP/s.llm" --role prefill -o "$TMP/x" && has "$TMP/err" "--role prefill needs --batch FILE" &&
    expect 2 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" --role prefill --temp 0 -o "$TMP/x" &&
    has "$TMP/err" "goes to the decode side" &&
    expect 2 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" --role prefill --resume -o "$TMP/x" &&
    expect 2 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" --role both && has "$TMP/err" "not prefill or decode" &&
    expect 2 "$RUN" -m "$TMP/s.llm" --role decode --kv-compress && has "$TMP/err" "--kv-compress goes with" &&
    expect 1 sh -c "'$RUN' -m '$TMP/s.llm' --role decode </dev/null" && has "$TMP/err" "empty: no handoff stream" && one_line
}
t_run_batch_usage_and_file_errors() {
    r_stories
    batch_requests
    expect 2 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" --resume && has "$TMP/err" "needs -o FILE" &&
    expect 2 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" -p hi && has "$TMP/err" "-p does not go with --batch" &&
    expect 2 "$RUN" -m "$TMP/s.llm" -p hi --max-seqs 4 && has "$TMP/err" "go with --batch" &&
    expect 2 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" $(for i in $(seq 17); do echo --stop s$i; done) &&
    has "$TMP/err" "at most 16 strings with --batch" &&
    expect 1 "$RUN" -m "$TMP/s.llm" --batch "$TMP/nonexistent.jsonl" && has "$TMP/err" "nonexistent.jsonl" && one_line &&
    expect 1 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" -o /nonexistent/dir/o.jsonl && one_line &&
    echo 'garbage' >"$TMP/g.jsonl" &&
    expect 1 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" -o "$TMP/g.jsonl" --resume &&
    has "$TMP/err" "$TMP/g.jsonl:1: not an output line" && one_line &&
    bad_llm && expect 1 "$RUN" -m "$TMP/bad.llm" --batch "$TMP/req.jsonl" && one_line && [ ! -s "$TMP/out" ]
}
# The trace has one line per step; the summary JSON its counters.
t_run_batch_trace_and_stats() {
    r_stories
    batch_requests
    expect 0 "$RUN" -m "$TMP/s.llm" --batch "$TMP/req.jsonl" --kv-trace "$TMP/trace.jsonl" \
        --stats-json "$TMP/stats.json" || return 1
    local steps; steps=$(grep -o '"steps":[0-9]*' "$TMP/stats.json" | cut -d: -f2)
    [ "$steps" -gt 10 ] && [ "$(wc -l <"$TMP/trace.jsonl")" = "$steps" ] &&
    has "$TMP/stats.json" '"requests":5,"answered":5,"errors":0' &&
    tail -1 "$TMP/trace.jsonl" | grep -q '"running":0,"waiting":0,"finished":5' &&
    expect 0 "$BIN/llm-kvstat" --trace "$TMP/trace.jsonl" --json && has "$TMP/out" '"finished":5,'
}
# A prompt larger than the whole pool is an error record; a request that
# outgrows the pool alone ends with "length" instead of hanging.
t_run_batch_small_pool() {
    r_stories
    echo '{"prompt":"Once upon a time there was a girl who liked to play in the park with her dog","max_tokens":60,"n":3,"temperature":0}' >"$TMP/small.jsonl"
    expect 3 "$RUN" -m "$TMP/s.llm" --batch "$TMP/small.jsonl" --kv-blocks 1 --block-size 8 &&
    has "$TMP/out" '"code":"context_length_exceeded"' && has "$TMP/out" "more than the pool's 1" || return 1
    expect 0 timeout 60 "$RUN" -m "$TMP/s.llm" --batch "$TMP/small.jsonl" --kv-blocks 5 --block-size 8 &&
    has "$TMP/out" '"finish_reason":"length"' && has "$TMP/out" '"status_code":200'
}

# ---- KV state files (--prefill-only --kv-out, --kv-in, --prompt-cache) -------
# A state written after the prompt and continued in another process gives
# the text of one uninterrupted run: sampled, with the sampler options of
# the run that wrote it, f16 and f32, zstd or not, several completions, a
# pipe. Options given to the continuation win over the state's.
t_run_kv_state_continues_as_one_run() {
    r_stories
    local p="Once upon a time" o
    for o in "" "--kv-type f32 --kv-compress" "--temp 1.2 --top-k 20 --repeat-penalty 1.3 --kv-compress"; do
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/s.llm" -p "$p" -s 7 -n 90 ${o/--kv-compress/} && mv "$TMP/out" "$TMP/one" || return 1
        # shellcheck disable=SC2086
        expect 0 "$RUN" -m "$TMP/s.llm" -p "$p" -s 7 $o --prefill-only --kv-out "$TMP/st.kv" -v &&
            has "$TMP/err" "stop: prefill" && [ ! -s "$TMP/out" ] || return 1
        expect 0 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/st.kv" -n 90 -v && cmp "$TMP/one" "$TMP/out" &&
            has "$TMP/err" "prompt: 5 tokens (5 from the KV state)" || return 1
    done
    # a pipe, several completions, and a continuation that overrides the
    # temperature and the seed (its text is that of a run with them)
    expect 0 "$RUN" -m "$TMP/s.llm" -p "$p" -s 3 --temp 0.9 -n 40 --n-seq 3 && mv "$TMP/out" "$TMP/one" || return 1
    "$RUN" -m "$TMP/s.llm" -p "$p" -s 11 --temp 0.9 --prefill-only --kv-out - |
        "$RUN" -m "$TMP/s.llm" --kv-in - -s 3 -n 40 --n-seq 3 >"$TMP/out" && cmp "$TMP/one" "$TMP/out" || return 1
    "$RUN" -m "$TMP/s.llm" -p "$p" -s 3 -n 40 --temp 0 >"$TMP/one" &&
        "$RUN" -m "$TMP/s.llm" -p "$p" -s 11 --temp 0.9 --prefill-only --kv-out - --kv-compress |
        "$RUN" -m "$TMP/s.llm" --kv-in - -n 40 --temp 0 >"$TMP/out" && cmp "$TMP/one" "$TMP/out"
}
# The same with SmolLM2, a chat prompt of several KV blocks, in f16 across a
# pipe; and a state written while generating (--kv-out FILE without
# --prefill-only) continues the same way.
t_run_kv_state_smollm2_chat_pipe() {
    r_smol || return 1
    local p="Write three sentences about the history of Rome and its emperors."
    expect 0 "$RUN" -m "$TMP/smol.llm" --chat -p "$p" -s 4 -n 40 -t 2 --kv-out "$TMP/st.kv" &&
        mv "$TMP/out" "$TMP/one" && [ -s "$TMP/st.kv" ] || return 1
    "$RUN" -m "$TMP/smol.llm" --chat -p "$p" -s 4 -t 2 --prefill-only --kv-out - |
        "$RUN" -m "$TMP/smol.llm" --kv-in - -n 40 -t 2 >"$TMP/out" && cmp "$TMP/one" "$TMP/out" || return 1
    expect 0 "$RUN" -m "$TMP/smol.llm" --kv-in "$TMP/st.kv" -n 40 -t 2 && cmp "$TMP/one" "$TMP/out"
}
# A state from another model, another KV type, or a damaged file is refused
# in one line naming the file and the reason, before any text.
t_run_kv_state_refusals() {
    r_stories
    "$BIN/llm-convert" -q "$TMP/s.llm" -t q8_0 -o "$TMP/s8.llm" &&
        "$RUN" -m "$TMP/s.llm" -p Once -s 1 --prefill-only --kv-out "$TMP/st.kv" || return 1
    local n
    n=$(wc -c <"$TMP/st.kv")
    expect 1 "$RUN" -m "$TMP/s8.llm" --kv-in "$TMP/st.kv" -n 5 && one_line &&
        has "$TMP/err" "st.kv: the state was computed by another model" && [ ! -s "$TMP/out" ] || return 1
    expect 1 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/st.kv" -n 5 --kv-type f32 && one_line &&
        has "$TMP/err" "st.kv: the state holds f16 KV rows, this run's cache is f32 (--kv-type f16)" || return 1
    head -c $((n - 20)) "$TMP/st.kv" >"$TMP/cut.kv"
    expect 1 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/cut.kv" -n 5 && one_line &&
        has "$TMP/err" "cut.kv: the state ends early, in the KV rows of positions 0-1 (a cut file)" || return 1
    head -c 40 "$TMP/st.kv" >"$TMP/cut.kv"
    expect 1 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/cut.kv" -n 5 && has "$TMP/err" "ends early, in the header" || return 1
    cp "$TMP/st.kv" "$TMP/flip.kv"
    printf '\x55' | dd of="$TMP/flip.kv" bs=1 seek=$((n - 100)) conv=notrunc status=none
    expect 1 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/flip.kv" -n 5 && one_line &&
        has "$TMP/err" "flip.kv: the KV rows of positions 0-1: the checksum does not match (a damaged file)" || return 1
    cp "$TMP/st.kv" "$TMP/flip.kv"
    printf '\x01' | dd of="$TMP/flip.kv" bs=1 seek=41 conv=notrunc status=none
    expect 1 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/flip.kv" -n 5 && has "$TMP/err" "header checksum does not match" || return 1
    { cat "$TMP/st.kv"; echo; } >"$TMP/long.kv"
    expect 1 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/long.kv" -n 5 && has "$TMP/err" "bytes follow the state's end mark" || return 1
    expect 1 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/s.llm" -n 5 && has "$TMP/err" "not a KV state file" || return 1
    expect 1 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/st.kv" -n 5 --ctx 1 && has "$TMP/err" "more than the context of 1" || return 1
    # usage
    expect 2 "$RUN" -m "$TMP/s.llm" -p Once --prefill-only && has "$TMP/err" "needs --kv-out" &&
        expect 2 "$RUN" -m "$TMP/s.llm" --kv-in "$TMP/st.kv" -p Once && has "$TMP/err" "-p does not go with --kv-in" &&
        expect 2 "$RUN" -m "$TMP/s.llm" -p Once --kv-out - && has "$TMP/err" "--kv-out - needs --prefill-only" &&
        expect 2 "$RUN" -m "$TMP/s.llm" -p Once --prefill-only --kv-out x -n 3 && has "$TMP/err" "-n does not go with it" &&
        expect 2 "$RUN" -m "$TMP/s.llm" --batch x --kv-out y && has "$TMP/err" "--kv-out does not go with --batch"
}
# --prompt-cache: a missing file is made; a longer prompt that starts with
# the cached one computes only the rest, and the same prompt nothing, with
# the text of a run without the cache; a shorter prompt leaves the cache as
# it was (as llama.cpp); a damaged cache is refused.
t_run_prompt_cache_reuse() {
    r_smol || return 1
    local p="The history of the Roman Empire spans many centuries" c="$TMP/pc.kv" o="-s 5 -n 24 -t 2"
    rm -f "$c"
    # shellcheck disable=SC2086
    expect 0 "$RUN" -m "$TMP/smol.llm" -p "$p" $o --prompt-cache "$c" -v && [ -s "$c" ] &&
        has "$TMP/err" "prompt: 9 tokens in" || return 1
    # shellcheck disable=SC2086
    "$RUN" -m "$TMP/smol.llm" -p "$p, and its influence" $o >"$TMP/one" || return 1
    # shellcheck disable=SC2086
    expect 0 "$RUN" -m "$TMP/smol.llm" -p "$p, and its influence" $o --prompt-cache "$c" -v &&
        has "$TMP/err" "prompt: 13 tokens (9 from the KV state)" && cmp "$TMP/one" "$TMP/out" || return 1
    # shellcheck disable=SC2086
    expect 0 "$RUN" -m "$TMP/smol.llm" -p "$p, and its influence" $o --prompt-cache "$c" -v &&
        has "$TMP/err" "prompt: 13 tokens (13 from the KV state)" && cmp "$TMP/one" "$TMP/out" || return 1
    cp "$c" "$TMP/before.kv"
    # shellcheck disable=SC2086
    "$RUN" -m "$TMP/smol.llm" -p "The history" $o >"$TMP/one" &&
        expect 0 "$RUN" -m "$TMP/smol.llm" -p "The history" $o --prompt-cache "$c" -v &&
        has "$TMP/err" "prompt: 2 tokens (1 from the KV state)" && cmp "$TMP/one" "$TMP/out" &&
        cmp "$c" "$TMP/before.kv" || return 1
    printf '\x55' | dd of="$c" bs=1 seek=$(($(wc -c <"$c") - 100)) conv=notrunc status=none
    # shellcheck disable=SC2086
    expect 1 "$RUN" -m "$TMP/smol.llm" -p "$p" $o --prompt-cache "$c" && one_line &&
        has "$TMP/err" "pc.kv: the KV rows of positions 0-12: the checksum does not match" && [ ! -s "$TMP/out" ]
}
# The bf16 and q8 KV caches: the model still answers (a broken attention
# would not), completions batched are the texts alone, and a state
# continues as one run and is refused by an f16 cache. q8 needs heads of a
# multiple of 32 (stories260K's are 8).
# kv_type_case OPTIONS NAMES: the KV cache of OPTIONS (--kv-type q8, or
# --kv-type-k and --kv-type-v) answers, gives each of 3 sequences of a
# batch the bits it gets alone, continues from its state file with the
# bits of one run, and a state of it is refused by an f16 cache, naming
# NAMES ("q8 KV", "q8 K and q4 V") and the options that take it.
kv_type_case() {
    local t=$1 i
    # shellcheck disable=SC2086 # $t is several words
    expect 0 "$RUN" -m "$TMP/smol.llm" -p "The capital of France is" --temp 0 -n 3 -t 2 $t &&
        has "$TMP/out" " Paris" || return 1
    # shellcheck disable=SC2086
    expect 0 "$RUN" -m "$TMP/smol.llm" -p "Once upon" -s 2 -n 24 -t 2 $t --n-seq 3 --json || return 1
    command -v python3 >/dev/null || skip "no python3"
    python3 -c 'import json,sys; [print(json.dumps(c["text"])) for c in json.load(open(sys.argv[1]))["completions"]]' \
        "$TMP/out" >"$TMP/n3" || return 1
    for i in 0 1 2; do
        # shellcheck disable=SC2086
        "$RUN" -m "$TMP/smol.llm" -p "Once upon" -s $((2 + i)) -n 24 -t 2 $t --json |
            python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["text"]))'
    done >"$TMP/n1" && cmp "$TMP/n3" "$TMP/n1" || return 1
    # shellcheck disable=SC2086
    "$RUN" -m "$TMP/smol.llm" -p "Once upon" -s 2 -n 24 -t 2 $t >"$TMP/one" &&
        "$RUN" -m "$TMP/smol.llm" -p "Once upon" -s 2 -t 2 $t --prefill-only --kv-out "$TMP/b.kv" &&
        expect 0 "$RUN" -m "$TMP/smol.llm" --kv-in "$TMP/b.kv" -n 24 -t 2 && cmp "$TMP/one" "$TMP/out" &&
        expect 1 "$RUN" -m "$TMP/smol.llm" --kv-in "$TMP/b.kv" -n 24 --kv-type f16 &&
        has "$TMP/err" "the state holds $2 rows, this run's cache is f16 ($t)"
}
t_run_kv_type_bf16() {
    r_smol || return 1
    kv_type_case "--kv-type bf16" "bf16 KV"
}
t_run_kv_type_q8() {
    r_smol || return 1
    kv_type_case "--kv-type q8" "q8 KV" || return 1
    r_stories
    expect 1 "$RUN" -m "$TMP/s.llm" -p Once -n 2 --kv-type q8 && one_line &&
        has "$TMP/err" "KV cache type q8 is not supported (f32, f16, bf16, fp8_e4m3, q4ch keys, and q8 and q4 for heads of a multiple of 32: these are 8)"
}
t_run_kv_type_q4() {
    r_smol || return 1
    kv_type_case "--kv-type q4" "q4 KV" || return 1
    r_stories
    expect 1 "$RUN" -m "$TMP/s.llm" -p Once -n 2 --kv-type-v q4 && one_line &&
        has "$TMP/err" "KV cache type q4 is not supported"
}
# q4ch: keys per channel over each KV block (kv.h). Besides the cases of
# every type: a prompt of several blocks through a state file, a prompt
# cache cut inside a quantized block (computed again: the fresh run's
# text), speculation whose rollbacks reach past the fp16 rows, and the
# refusals.
t_run_kv_type_q4ch() {
    r_smol || return 1
    kv_type_case "--kv-type q4ch" "q4ch K and q4 V" || return 1
    local kv="--kv-type q4ch" p="The history of Rome begins with a small village on the Tiber, where shepherds and farmers lived on seven hills above the marshes of the river valley,"
    # shellcheck disable=SC2086 # $kv is several words
    "$RUN" -m "$TMP/smol.llm" -t 2 $kv -n 24 --temp 0 -p "$p" >"$TMP/one" &&
        "$RUN" -m "$TMP/smol.llm" -t 2 $kv --temp 0 -p "$p" --prefill-only --kv-out "$TMP/long.kv" &&
        expect 0 "$RUN" -m "$TMP/smol.llm" --kv-in "$TMP/long.kv" -n 24 -t 2 && cmp "$TMP/one" "$TMP/out" || return 1
    # the cache holds 36 tokens, the next prompt 30 of which the first 29
    # match: a cut inside block 1, quantized, so block 0 is taken (16)
    "$RUN" -m "$TMP/smol.llm" -t 2 $kv -n 4 --temp 0 -p "$p and then it grew into a city" --prompt-cache "$TMP/pc4.kv" >/dev/null &&
        "$RUN" -m "$TMP/smol.llm" -t 2 $kv -n 12 --temp 0 -p "$p but" >"$TMP/fresh" &&
        expect 0 "$RUN" -m "$TMP/smol.llm" -t 2 $kv -n 12 --temp 0 -p "$p but" --prompt-cache "$TMP/pc4.kv" -v &&
        cmp "$TMP/fresh" "$TMP/out" || return 1
    has "$TMP/err" "(16 from the KV state)" || return 1
    # speculation with drafts longer than a block, which the 4-bit model
    # disagrees with: rollbacks past the fp16 rows (positions 32-40, then
    # 32-46: computed again in both contexts)
    [ -e "$TMP/smol-q8.llm" ] || "$BIN/llm-convert" -q "$R_SMOL" -t q8_0 -o "$TMP/smol-q8.llm" || return 1
    p="Name the planets of the solar system."
    expect 0 "$RUN" -m "$TMP/smol-q8.llm" -t 2 $kv -n 48 --temp 0 --chat -p "$p" && mv "$TMP/out" "$TMP/plain" &&
        expect 0 "$RUN" -m "$TMP/smol-q8.llm" -t 2 $kv -n 48 --temp 0 --chat -p "$p" \
            --draft "$TMP/smol.llm" --draft-n 40 && cmp "$TMP/plain" "$TMP/out" || return 1
    expect 1 "$RUN" -m "$TMP/smol.llm" --kv-in "$TMP/long.kv" -n 4 --block-size 32 &&
        has "$TMP/err" "the state's q4ch keys are in blocks of 16, this run's cache has blocks of 32 (--block-size 16)" &&
        expect 1 "$RUN" -m "$TMP/smol.llm" -p x -n 1 $kv --block-size 8 && one_line &&
        has "$TMP/err" "q4ch keys need a block size of 16, 32, 64 or 128" &&
        expect 2 "$RUN" -m "$TMP/smol.llm" -p x --kv-type-v q4ch && has "$TMP/err" "q4ch is a type for keys"
}
t_run_kv_type_fp8() {
    r_smol || return 1
    kv_type_case "--kv-type fp8_e4m3" "fp8_e4m3 KV"
}
# K and V in different types; a state keeps both, and --kv-in takes each
# from it unless given
t_run_kv_type_k_and_v() {
    r_smol || return 1
    kv_type_case "--kv-type-k q8 --kv-type-v q4" "q8 K and q4 V" || return 1
    expect 1 "$RUN" -m "$TMP/smol.llm" --kv-in "$TMP/b.kv" -n 4 --kv-type-v q8 &&
        has "$TMP/err" "the state holds q8 K and q4 V rows, this run's cache is q8 (--kv-type-k q8 --kv-type-v q4)" &&
        expect 0 "$RUN" -m "$TMP/smol.llm" --kv-in "$TMP/b.kv" -n 24 -t 2 --kv-type-k q8 &&
        cmp "$TMP/one" "$TMP/out" || return 1
    # a prompt cache of rows of two sizes, taken in part: the text of a fresh run
    local kv="--kv-type-k q8 --kv-type-v q4" p="The history of Rome begins with a small village on the Tiber,"
    # shellcheck disable=SC2086 # $kv is several words
    "$RUN" -m "$TMP/smol.llm" -t 2 $kv -n 4 --temp 0 -p "$p and then it grows into" --prompt-cache "$TMP/pc.kv" >/dev/null &&
        "$RUN" -m "$TMP/smol.llm" -t 2 $kv -n 12 --temp 0 -p "$p where shepherds" >"$TMP/fresh" &&
        expect 0 "$RUN" -m "$TMP/smol.llm" -t 2 $kv -n 12 --temp 0 -p "$p where shepherds" --prompt-cache "$TMP/pc.kv" -v &&
        has "$TMP/err" "(13 from the KV state)" && cmp "$TMP/fresh" "$TMP/out" || return 1
    expect 2 "$RUN" -m "$TMP/smol.llm" -p x --kv-type-k q3 &&
        has "$TMP/err" "--kv-type-k: 'q3' is not f32, f16, bf16, q8, fp8_e4m3, q4 or q4ch"
}
# --batch over a q4 cache (keys q8, or q4ch): each answer is its single
# run's over the same cache, with chunked prefill (a prompt of several
# blocks in pieces of 7) and a step shared by several requests
LONG_P="Rome was founded on seven hills beside the Tiber, and over the centuries its people built roads, aqueducts, temples and a forum"
t_run_batch_kv_q4_matches_single_runs() {
    r_smol || return 1
    command -v python3 >/dev/null || skip "no python3"
    {
        echo '{"custom_id":"a","body":{"prompt":"The capital of France is","max_tokens":12,"temperature":0}}'
        echo '{"custom_id":"b","body":{"prompt":"Once upon a time, in a small village","max_tokens":16,"temperature":0}}'
        echo '{"custom_id":"c","body":{"prompt":"Water boils at","max_tokens":10,"temperature":0.8,"seed":4}}'
        echo '{"custom_id":"d","body":{"prompt":"'"$LONG_P"'","max_tokens":6,"temperature":0}}'
    } >"$TMP/q4.jsonl"
    local kv
    for kv in "--kv-type q4" "--kv-type-k q8 --kv-type-v q4" "--kv-type q4ch"; do
        # shellcheck disable=SC2086 # $kv is several words
        expect 0 "$RUN" -m "$TMP/smol.llm" -t 2 $kv --batch "$TMP/q4.jsonl" -o "$TMP/b.jsonl" \
            --max-seqs 3 --step-tokens 7 || return 1
        batch_texts "$TMP/b.jsonl" >"$TMP/bt.txt"
        {
            # shellcheck disable=SC2086
            for a in "1|The capital of France is|12|0|0" "2|Once upon a time, in a small village|16|0|0" \
                "3|Water boils at|10|0.8|4" "4|$LONG_P|6|0|0"; do
                IFS='|' read -r l p n t s <<<"$a"
                "$RUN" -m "$TMP/smol.llm" -t 2 $kv --json -p "$p" -n "$n" --temp "$t" -s "$s" |
                    python3 -c 'import json,sys; o=json.load(sys.stdin); print(sys.argv[1], 0, json.dumps(o["text"]), "stop" if o["stop_reason"] in ("eos","stop") else "length")' "$l"
            done
        } >"$TMP/st.txt"
        diff "$TMP/st.txt" "$TMP/bt.txt" || return 1
    done
}

# ---- sliding windows ------------------------------------------------------------
# A window layer keeps only its window's rows (llm-run(1), Sliding windows):
# on random mistral (every layer) and gemma3 (5 of 6) models with a window
# of 7 and the tinystories tokenizer, a batch of requests that share a long
# prompt gives the same answers in steps of 8 tokens (each sequence then
# holds a few window slots) as in steps of 2048 (every layer in full), with
# the prefix cache and without, and -v says how many slots were used; a
# prompt's state written in steps of 8 goes on in another process with the
# same text.
t_run_sliding_window_bounded_same_answers() {
    need "$R_TOK" "$DATA/text/tinystories_val.txt"
    local a long
    long=$(head -c 3000 "$DATA/text/tinystories_val.txt" | tr -d '"\\\n\t')
    for a in mistral gemma3; do
        printf 'architecture: %s\nsliding_window: 7\nembedding_length: 64\nfeed_forward_length: 128\nblock_count: 6\nhead_count: 4\nhead_count_kv: 2\nhead_dim: 16\nvocab_size: 512\ncontext_length: 2048\nrope_theta: 10000.0\nrms_norm_eps: 1e-5\ntie_embeddings: true\n' "$a" >"$TMP/w.yaml"
        "$BIN/llm-convert" -q --synthetic "$TMP/w.yaml" --tokenizer "$R_TOK" -o "$TMP/w-$a.llm" || return 1
        : >"$TMP/wreq.jsonl"
        local i
        for i in 1 2 3 4 5; do
            printf '{"custom_id": "w%d", "body": {"prompt": "%s Then %d.", "max_tokens": 12, "temperature": 0}}\n' \
                "$i" "$long" "$i" >>"$TMP/wreq.jsonl"
        done
            expect 0 "$RUN" -m "$TMP/w-$a.llm" --batch "$TMP/wreq.jsonl" --ctx 2048 --step-tokens 2048 -v &&
            ! has "$TMP/err" "window slots" && mv "$TMP/out" "$TMP/full.jsonl" || return 1
        expect 0 "$RUN" -m "$TMP/w-$a.llm" --batch "$TMP/wreq.jsonl" --ctx 2048 --step-tokens 8 -v &&
            has "$TMP/err" "window slots:" &&
            diff <(batch_strip "$TMP/full.jsonl") <(batch_strip "$TMP/out") || { echo "$a: steps of 8 differ"; return 1; }
        expect 0 "$RUN" -m "$TMP/w-$a.llm" --batch "$TMP/wreq.jsonl" --ctx 2048 --step-tokens 8 \
            --no-prefix-cache --max-seqs 2 &&
            diff <(batch_strip "$TMP/full.jsonl") <(batch_strip "$TMP/out") || { echo "$a: no prefix cache differs"; return 1; }
    done
    # a state across processes, in a single run (steps of 512: the window
    # layers bounded at --ctx 2048)
    expect 0 "$RUN" -m "$TMP/w-gemma3.llm" -p "$long" --ctx 2048 -n 20 --temp 0 -v &&
        has "$TMP/err" "window slots:" && mv "$TMP/out" "$TMP/one" || return 1
    expect 0 "$RUN" -m "$TMP/w-gemma3.llm" -p "$long" --ctx 2048 --prefill-only --kv-out "$TMP/w.kv" &&
    expect 0 "$RUN" -m "$TMP/w-gemma3.llm" --kv-in "$TMP/w.kv" --ctx 2048 -n 20 --temp 0 &&
        cmp "$TMP/one" "$TMP/out"
}
