# llm-kvstat CLI cases (sourced by tests/cli/run.sh, which defines expect,
# has, need, skip, $TMP, $DATA, $MODELS, $BIN and $ROOT).
KVSTAT=$BIN/llm-kvstat
KVGOLD=$ROOT/tests/cli/golden/llm-kvstat

# golden NAME ARGS...: stdout of llm-kvstat ARGS must equal $KVGOLD/NAME
# (LLM_GOLDEN_UPDATE=1 rewrites the file instead)
kv_golden() {
    local name=$1; shift
    expect 0 "$KVSTAT" "$@" || return 1
    if [ "${LLM_GOLDEN_UPDATE:-}" = 1 ]; then cp "$TMP/out" "$KVGOLD/$name"; fi
    diff -u "$KVGOLD/$name" "$TMP/out"
}
# kv_json_field ARGS... FIELD: the integer value of a top-level field
kv_field() { grep -o "\"$1\": [0-9]*" "$TMP/out" | head -1 | sed 's/.*: //'; }

# ---- the command line ------------------------------------------------------
t_kvstat_help() {
    expect 0 "$KVSTAT" -h && has "$TMP/out" "Usage: llm-kvstat" && has "$TMP/out" "--lengths-synthetic" &&
    [ ! -s "$TMP/err" ]
}
t_kvstat_bad_option_exits_2() {
    expect 2 "$KVSTAT" --no-such-option && has "$TMP/err" "unknown option" &&
    has "$TMP/err" "Try 'llm-kvstat --help'."
}
t_kvstat_usage_errors_exit_2() {
    expect 2 "$KVSTAT" || return 1; has "$TMP/err" "give one of MODEL" || return 1
    expect 2 "$KVSTAT" --preset llama-2-7b --config x.json || return 1
    expect 2 "$KVSTAT" --preset llama-2-7b --kv-type q4_0 && has "$TMP/err" "unknown KV type 'q4_0'" || return 1
    expect 2 "$KVSTAT" --preset llama-2-7b --ctx 0 && has "$TMP/err" "--ctx" || return 1
    expect 2 "$KVSTAT" --preset gemma3-270m --step-tokens 0 && has "$TMP/err" "--step-tokens: 0 is out of range" || return 1
    expect 2 "$KVSTAT" --trace x.jsonl --step-tokens 8 && has "$TMP/err" "--trace takes no model" || return 1
    expect 2 "$KVSTAT" --preset llama-2-7b --mem 12Q && has "$TMP/err" "--mem" || return 1
    expect 2 "$KVSTAT" --preset llama-2-7b --weights 1G && has "$TMP/err" "--weights goes with --mem" || return 1
    expect 2 "$KVSTAT" --preset llama-2-7b --seed 3 && has "$TMP/err" "--seed goes with" || return 1
    expect 2 "$KVSTAT" --preset llama-2-7b --lengths-synthetic poisson:1:2:3 &&
        has "$TMP/err" "poisson:1:2:3" || return 1
    expect 2 "$KVSTAT" --preset llama-2-7b --lengths a --lengths-synthetic uniform:1:2:3
}
t_kvstat_synopsis_matches_man() {
    need "$ROOT/man/llm-kvstat.1"
    "$ROOT/scripts/check-synopsis.sh" "$KVSTAT" "$ROOT/man/llm-kvstat.1"
}

# ---- published figures -----------------------------------------------------
t_kvstat_known_figures() {
    expect 0 "$KVSTAT" --preset llama-2-7b --ctx 4096 --json || return 1
    [ "$(kv_field bytes_per_token)" = 524288 ] && [ "$(kv_field bytes_per_sequence)" = 2147483648 ] || return 1
    expect 0 "$KVSTAT" --preset llama-2-70b --json && [ "$(kv_field bytes_per_token)" = 327680 ] || return 1
    expect 0 "$KVSTAT" --preset llama-3-8b --json && [ "$(kv_field bytes_per_token)" = 131072 ] || return 1
    expect 0 "$KVSTAT" --preset llama-3-8b --kv-type fp8 --json && [ "$(kv_field bytes_per_token)" = 65536 ]
}
t_kvstat_json_parses() {
    command -v python3 >/dev/null || skip "no python3"
    expect 0 "$KVSTAT" --preset mistral-7b --mem 24G --lengths-synthetic normal:1000:500:200 --json || return 1
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["capacity"]["tokens"] == 24*2**30//131072; assert d["fragmentation"]["sequences"] == 200' "$TMP/out"
}

# ---- golden outputs --------------------------------------------------------
t_kvstat_golden_table() { kv_golden llama-2-7b.txt --preset llama-2-7b --ctx 4096; }
t_kvstat_golden_json() { kv_golden llama-2-7b.json --preset llama-2-7b --ctx 4096 --json; }
# sliding windows: Gemma 3's 15 window layers bounded, the 3 global ones
# the whole context, and what fits in 1 GiB so
t_kvstat_golden_sliding_window() { kv_golden gemma3-270m-window.txt --preset gemma3-270m --mem 1G; }
t_kvstat_golden_capacity_waste() {
    kv_golden llama-3-70b-waste.txt --preset llama-3-70b --ctx 4096 --kv-type fp8 --mem 80G --weights 70G \
        --lengths "$KVGOLD/lengths.txt"
}
t_kvstat_golden_capacity_waste_json() {
    kv_golden llama-3-70b-waste.json --preset llama-3-70b --ctx 4096 --kv-type fp8 --mem 80G --weights 70G \
        --lengths "$KVGOLD/lengths.txt" --json
}
t_kvstat_golden_synthetic() {
    kv_golden smollm2-uniform.txt --preset smollm2-135m --ctx 2048 --batch 4 --block-size 32 --mem 1G \
        --lengths-synthetic uniform:1:2048:500 --seed 7
}
t_kvstat_golden_presets() { kv_golden presets.txt --list-presets; }

# ---- inputs ----------------------------------------------------------------
t_kvstat_config_json() {
    printf '{"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,\n"hidden_size": 8192, "max_position_embeddings": 4096}\n' >"$TMP/config.json"
    expect 0 "$KVSTAT" --config "$TMP/config.json" --json && [ "$(kv_field bytes_per_token)" = 327680 ] || return 1
    has "$TMP/out" '"source": "config"' || return 1
    # a directory means DIR/config.json
    expect 0 "$KVSTAT" --config "$TMP" --json && [ "$(kv_field bytes_per_token)" = 327680 ]
}
t_kvstat_malformed_config_names_file() {
    printf '{"num_hidden_layers": 80,\n "num_attention_heads": }\n' >"$TMP/bad.json"
    expect 1 "$KVSTAT" --config "$TMP/bad.json" && has "$TMP/err" "llm-kvstat: $TMP/bad.json:2: not valid JSON" || return 1
    printf '{"num_attention_heads": 8, "hidden_size": 64}\n' >"$TMP/bad.json"
    expect 1 "$KVSTAT" --config "$TMP/bad.json" &&
        has "$TMP/err" "llm-kvstat: $TMP/bad.json: missing key 'num_hidden_layers'" || return 1
    expect 1 "$KVSTAT" --config "$TMP/none.json" && has "$TMP/err" "$TMP/none.json"
}
t_kvstat_unknown_preset() {
    expect 2 "$KVSTAT" --preset llama-9-1t && has "$TMP/err" "unknown preset 'llama-9-1t'" &&
    has "$TMP/err" "llama-2-7b"
}
t_kvstat_bad_lengths_file() {
    printf '12\n\nabc\n' >"$TMP/len.txt"
    expect 1 "$KVSTAT" --preset llama-2-7b --lengths "$TMP/len.txt" &&
        has "$TMP/err" "llm-kvstat: $TMP/len.txt:3: 'abc' is not a positive integer" || return 1
    printf '12\n5000\n' >"$TMP/len.txt"
    expect 1 "$KVSTAT" --preset llama-2-7b --ctx 4096 --lengths "$TMP/len.txt" &&
        has "$TMP/err" "$TMP/len.txt:2: length 5000 exceeds the context (4096)"
}
t_kvstat_missing_model() {
    expect 1 "$KVSTAT" /nonexistent/m.llm && has "$TMP/err" "llm-kvstat: /nonexistent/m.llm: "
}
t_kvstat_real_model() {
    local g=$DATA/gguf/stories260K.gguf
    need "$g"
    # 2 x 5 layers x 4 KV heads x 8 x 2 bytes; weights 292,800 f32 values
    expect 0 "$KVSTAT" "$g" --mem 2M --json && [ "$(kv_field bytes_per_token)" = 640 ] || return 1
    has "$TMP/out" '"weights": 1171200' && has "$TMP/out" '"kv_mem": 925952' || return 1
    # the same through .llm
    "$BIN/llm-convert" "$g" -o "$TMP/kv-s.llm" || return 1
    expect 0 "$KVSTAT" "$TMP/kv-s.llm" --json && [ "$(kv_field bytes_per_token)" = 640 ]
}
t_kvstat_shared_prefix() {
    # llama-3-8b: 128 KiB a token, blocks of 16 = 2 MiB; 1500 of 2048 tokens shared by 32
    expect 0 "$KVSTAT" --preset llama-3-8b --ctx 2048 --batch 32 --shared-prefix 1500 --mem 16G --json &&
    has "$TMP/out" '"shared_blocks": 93, "blocks_per_sequence": 128, "own_blocks_per_sequence": 35' &&
    has "$TMP/out" '"blocks_unshared": 4096, "blocks_shared": 1213, "blocks_saved": 2883' &&
    has "$TMP/out" '"bytes_saved": 6046089216' && has "$TMP/out" '"sequences_shared": 231' || return 1
    expect 0 "$KVSTAT" --preset llama-3-8b --ctx 2048 --batch 32 --shared-prefix 1500 &&
    has "$TMP/out" "shared prefix: 1500 tokens of every one of 32 sequences" || return 1
    expect 1 "$KVSTAT" --preset llama-3-8b --ctx 1024 --shared-prefix 2000 &&
    has "$TMP/err" "outside 1..1024" && expect 2 "$KVSTAT" --preset llama-3-8b --shared-prefix 0
}

# ---- --trace -------------------------------------------------------------------
kv_step() { # t step running waiting finished used cached idle logical tokens prefill decode lookup hit preempt
    printf '{"t":%s,"step":%s,"running":%s,"waiting":%s,"finished":%s,"blocks":10,"blocks_used":%s,"blocks_free":%s,"blocks_cached":%s,"blocks_idle":%s,"blocks_logical":%s,"block_size":16,"tokens":%s,"prefill":%s,"decode":%s,"lookup_tokens":%s,"hit_tokens":%s,"preemptions":%s}\n' \
        "$1" "$2" "$3" "$4" "$5" "$6" $((10 - $6)) "$7" "$8" "$9" "${10}" "${11}" "${12}" "${13}" "${14}" "${15}"
}
# A trace of known numbers: its summary, to the digit.
t_kvstat_trace_summary() {
    {
        kv_step 0.5 1 2 3 0 4 2 0 4 48 48 0 60 0 0
        kv_step 1.0 2 3 4 1 8 4 2 6 96 30 2 80 20 1
        kv_step 1.5 3 1 0 2 10 5 5 0 0 0 3 100 25 1
        kv_step 2.0 4 0 0 3 2 2 2 0 0 0 1 100 25 1
    } >"$TMP/trace.jsonl"
    expect 0 "$KVSTAT" --trace "$TMP/trace.jsonl" --json &&
    has "$TMP/out" '"steps":4,"seconds":2.000000,"blocks":10,"block_size":16,"used_mean":0.6000,"used_peak":1.0000,"cached_mean":0.3250,"cache_only_mean":0.2250,"inside_block_waste":0.1250,"running_peak":3,"waiting_peak":4,"finished":3,"prefill_tokens":78,"decode_tokens":6,"prefix_lookup_tokens":100,"prefix_hit_tokens":25,"prefix_hit_rate":0.2500,"preemptions":1}' || return 1
    expect 0 "$KVSTAT" --trace "$TMP/trace.jsonl" --plot "$TMP/t.svg" && has "$TMP/out" "25.0% (25 of 100 prompt tokens)" &&
    has "$TMP/out" " 100% |" && grep -q '^  10% | *#' "$TMP/out" && has "$TMP/t.svg" "<polyline" &&
    [ "$(grep -c '<polyline' "$TMP/t.svg")" = 4 ] && tail -1 "$TMP/t.svg" | grep -q '</svg>'
}
t_kvstat_trace_bad_files_one_line() {
    kv_step 0.5 1 2 3 0 4 2 0 4 48 48 0 60 0 0 >"$TMP/t1.jsonl"
    kv_step 0.4 2 2 3 0 4 2 0 4 48 48 0 60 0 0 >>"$TMP/t1.jsonl"
    expect 1 "$KVSTAT" --trace "$TMP/t1.jsonl" && has "$TMP/err" "t1.jsonl:2: another pool or an earlier time" && one_line || return 1
    kv_step 0.5 1 2 3 0 4 2 0 4 48 48 0 60 0 0 | sed 's/"blocks_idle":0,//' >"$TMP/t2.jsonl"
    expect 1 "$KVSTAT" --trace "$TMP/t2.jsonl" && has "$TMP/err" '"blocks_idle" is missing' && one_line || return 1
    echo 'nope' >"$TMP/t3.jsonl"
    expect 1 "$KVSTAT" --trace "$TMP/t3.jsonl" && has "$TMP/err" "t3.jsonl:1: not a JSON object" && one_line || return 1
    : >"$TMP/t4.jsonl"
    expect 1 "$KVSTAT" --trace "$TMP/t4.jsonl" && has "$TMP/err" "empty trace" && one_line || return 1
    kv_step 0.5 1 2 3 0 4 5 0 4 48 48 0 60 0 0 >"$TMP/t5.jsonl"
    expect 1 "$KVSTAT" --trace "$TMP/t5.jsonl" && has "$TMP/err" "do not add up" && one_line || return 1
    expect 2 "$KVSTAT" --plot x.svg --preset llama-2-7b && expect 2 "$KVSTAT" --trace "$TMP/t1.jsonl" --preset llama-2-7b
}
# llm-run's q8 and q4 caches: blocks of 32 with their scales counted; heads
# that do not fit the blocks are refused
t_kvstat_q8_q4_blocks() {
    expect 0 "$KVSTAT" --preset smollm2-135m --ctx 2048 --kv-type q4 --json &&
        [ "$(kv_field bytes_per_token)" = 6480 ] && has "$TMP/out" '"kv_type_bytes": 0.5625' &&
        has "$TMP/out" '"q8": 12240, "q4": 6480' || return 1
    expect 0 "$KVSTAT" --preset smollm2-135m --ctx 2048 --kv-type q8_0 && has "$TMP/out" "KV type   q8 (1.0625 bytes)" || return 1
    expect 1 "$KVSTAT" --preset stories260k --kv-type q4 && one_line &&
        has "$TMP/err" "a q4 cache stores heads as blocks of 32 elements: these have 8" || return 1
    # keys and values apart, as llm-run's --kv-type-k/-v: q8 keys, q4 values
    expect 0 "$KVSTAT" --preset smollm2-135m --ctx 4096 --kv-type q8 --kv-type-v q4 --mem 1G --json &&
        [ "$(kv_field bytes_per_token)" = 9360 ] && has "$TMP/out" '"kv_type": "q8/q4", "kv_type_bytes": 0.8125' &&
        has "$TMP/out" '"sequences_paged": 28' || return 1
    expect 0 "$KVSTAT" --preset smollm2-135m --kv-type-k q8 --kv-type-v q4 &&
        has "$TMP/out" "KV type   q8 K, q4 V (0.8125 bytes on average)" || return 1
    expect 0 "$KVSTAT" --preset smollm2-135m --kv-type-k q4 --kv-type-v q4 &&
        has "$TMP/out" "KV type   q4 (0.5625 bytes)" || return 1
    expect 1 "$KVSTAT" --preset stories260k --kv-type-v q8 && has "$TMP/err" "a q8 cache stores heads"
}
