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
    "$RUN" -m "$TMP/smol.llm" -p 'Once upon a time' --ignore-eos -n 100000 --temp 0 -t 1 \
        >"$TMP/out" 2>"$TMP/err" &
    local pid=$! i
    # interrupt only once generation has started (a sanitizer build loads slowly)
    for i in $(seq 1200); do
        grep -q '^, the city of Nova Haven' "$TMP/out" 2>/dev/null && break
        sleep 0.1
    done
    kill -INT $pid
    wait $pid
    local rc=$?
    [ $rc = 130 ] || { echo "exit $rc, expected 130"; cat "$TMP/err"; return 1; }
    has "$TMP/err" "llm-run: interrupted" && grep -q '^, the city of Nova Haven' "$TMP/out"
}
