# llm-convert CLI cases (sourced by tests/cli/run.sh, which defines expect,
# has, need, skip, $TMP, $DATA, $MODELS, $BIN and $ROOT).
CONVERT=$BIN/llm-convert
L2C=$DATA/llama2c/stories260K.bin
TOK=$DATA/llama2c/tok512.bin
G260=$DATA/gguf/stories260K.gguf
SMOL=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf

# ---- the command line ------------------------------------------------------
t_help() {
    expect 0 "$CONVERT" --help && has "$TMP/out" "Usage: llm-convert" && has "$TMP/out" "--synthetic" &&
    [ ! -s "$TMP/err" ]
}
t_version() { expect 0 "$CONVERT" -V && has "$TMP/out" "llm-convert "; }
t_bad_option_exits_2() {
    expect 2 "$CONVERT" --no-such-option && has "$TMP/err" "unknown option" &&
    has "$TMP/err" "Try 'llm-convert --help'." && [ "$(wc -l <"$TMP/err")" = 2 ]
}
t_missing_argument_exits_2() { expect 2 "$CONVERT" -o && has "$TMP/err" "needs an argument"; }
t_bad_type_exits_2() { expect 2 "$CONVERT" x -o y -t q9_9 && has "$TMP/err" "unknown type 'q9_9'"; }
t_no_output_exits_2() { expect 2 "$CONVERT" x && has "$TMP/err" "no output file"; }
t_synopsis_matches_man() {
    need "$ROOT/man/llm-convert.1" "$ROOT/scripts/check-synopsis.sh"
    "$ROOT/scripts/check-synopsis.sh" "$CONVERT" "$ROOT/man/llm-convert.1"
}
t_completions_up_to_date() {
    need "$ROOT/scripts/gen-completions.sh"
    LLM_BIN="$BIN" "$ROOT/scripts/gen-completions.sh" --check
}

# ---- bad input -------------------------------------------------------------
t_missing_file() {
    expect 1 "$CONVERT" /nonexistent/m.gguf -o "$TMP/x.llm" &&
    has "$TMP/err" "llm-convert: /nonexistent/m.gguf: cannot open" && [ ! -e "$TMP/x.llm" ]
}
t_random_bytes_refused() {
    head -c 5000 /dev/urandom >"$TMP/rand.bin"
    expect 1 "$CONVERT" "$TMP/rand.bin" -o "$TMP/x.llm" && has "$TMP/err" "llm-convert: $TMP/rand.bin: " &&
    [ ! -e "$TMP/x.llm" ]
}
t_truncated_gguf_refused() {
    need "$G260"
    local n
    for n in 3 23 24 100 5000 14152 14176 500000 1185375; do
        head -c $n "$G260" >"$TMP/cut.gguf"
        expect 1 "$CONVERT" --info "$TMP/cut.gguf" || return 1
        has "$TMP/err" "llm-convert: $TMP/cut.gguf: " || return 1
    done
}
t_truncated_llm_refused() {
    need "$G260"
    "$CONVERT" "$G260" -o "$TMP/m.llm" || return 1
    local size n
    size=$(stat -c %s "$TMP/m.llm")
    for n in 0 8 63 64 500 $((size / 2)) $((size - 64)) $((size - 1)); do
        head -c $n "$TMP/m.llm" >"$TMP/cut.llm"
        expect 1 "$CONVERT" --info "$TMP/cut.llm" || return 1
        has "$TMP/err" "llm-convert: $TMP/cut.llm: " || return 1
    done
}
t_verify_detects_corruption() {
    need "$G260"
    "$CONVERT" "$G260" -o "$TMP/m.llm" || return 1
    expect 0 "$CONVERT" --verify "$TMP/m.llm" && has "$TMP/out" "OK (" || return 1
    # flip one byte in the middle of the weights (the metadata is at the start)
    cp "$TMP/m.llm" "$TMP/bad.llm"
    printf '\x55' | dd of="$TMP/bad.llm" bs=1 seek=600000 conv=notrunc status=none
    expect 1 "$CONVERT" --verify "$TMP/bad.llm" && has "$TMP/err" "checksum mismatch"
}

# ---- real models -----------------------------------------------------------
t_stories_llama2c_info() {
    need "$L2C" "$TOK"
    "$CONVERT" "$L2C" --tokenizer "$TOK" -o "$TMP/a.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/a.llm" || return 1
    local k
    for k in "embedding_length: 64" "block_count: 5" "head_count: 8" "head_count_kv: 4" \
             "vocab_size: 512" "feed_forward_length: 172" "n_tokens: 512"; do
        has "$TMP/out" "$k" || return 1
    done
}
t_stories_gguf_info() {
    need "$G260"
    expect 0 "$CONVERT" --info "$G260" || return 1
    local k
    for k in "embedding_length: 64" "block_count: 5" "head_count: 8" "head_count_kv: 4" \
             "vocab_size: 512" "tensors: 48"; do
        has "$TMP/out" "$k" || return 1
    done
}
t_stories_two_sources_bit_identical() {
    need "$L2C" "$TOK" "$G260"
    "$CONVERT" "$L2C" --tokenizer "$TOK" -o "$TMP/a.llm" && "$CONVERT" "$G260" -o "$TMP/b.llm" || return 1
    tensors "$TMP/a.llm" >"$TMP/ta" && tensors "$TMP/b.llm" | grep -v '"output.weight"' >"$TMP/tb" || return 1
    [ "$(wc -l <"$TMP/ta")" = 47 ] || { echo "expected 47 weight tensors"; return 1; }
    diff "$TMP/ta" "$TMP/tb" || return 1
    # and the tokenizer arrays agree too
    "$CONVERT" --info --checksums "$TMP/a.llm" | grep 'name: "tokenizer\.' | sort >"$TMP/va"
    "$CONVERT" --info --checksums "$TMP/b.llm" | grep 'name: "tokenizer\.' | sort >"$TMP/vb"
    diff "$TMP/va" "$TMP/vb"
}
t_gguf_llm_gguf_llm_lossless() {
    need "$G260"
    "$CONVERT" "$G260" -o "$TMP/1.llm" && "$CONVERT" "$TMP/1.llm" -o "$TMP/2.gguf" &&
    "$CONVERT" "$TMP/2.gguf" -o "$TMP/3.llm" || return 1
    diff <(tensors "$G260") <(tensors "$TMP/2.gguf") && diff <(tensors "$TMP/1.llm") <(tensors "$TMP/3.llm") &&
    diff <(infosorted "$TMP/1.llm") <(infosorted "$TMP/3.llm")
}
t_smollm2_q4_1_blocks_survive() {
    need "$SMOL"
    "$CONVERT" "$SMOL" -o "$TMP/cv-s.llm" && "$CONVERT" "$TMP/cv-s.llm" -o "$TMP/cv-s.gguf" || return 1
    tensors "$SMOL" >"$TMP/t0"
    grep -q 'type: q4_1' "$TMP/t0" || { echo "no q4_1 tensors in $SMOL"; return 1; }
    diff "$TMP/t0" <(tensors "$TMP/cv-s.llm") && diff "$TMP/t0" <(tensors "$TMP/cv-s.gguf")
}
t_vocab_only_gguf() {
    need "$DATA/vocab/ggml-vocab-gpt-2.gguf"
    "$CONVERT" "$DATA/vocab/ggml-vocab-gpt-2.gguf" -o "$TMP/v.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/v.llm" && has "$TMP/out" "n_tokens: 50257" &&
    has "$TMP/out" "parameters: 0" && has "$TMP/out" "model: gpt2"
}

# ---- pipes -----------------------------------------------------------------
t_pipe_in_info() {
    need "$G260"
    "$CONVERT" "$G260" -o "$TMP/m.llm" || return 1
    diff <("$CONVERT" --info "$TMP/m.llm" | tail -n +2) <(cat "$TMP/m.llm" | "$CONVERT" --info - | tail -n +2)
}
t_pipe_out_same_bytes() {
    need "$G260"
    "$CONVERT" "$G260" -o "$TMP/f.llm" && "$CONVERT" "$G260" -o - >"$TMP/p.llm" && cmp "$TMP/f.llm" "$TMP/p.llm" &&
    "$CONVERT" "$G260" -o - --compress | cmp - <("$CONVERT" "$G260" -o - --compress) &&
    "$CONVERT" "$G260" -o - | "$CONVERT" --info - >"$TMP/out" && has "$TMP/out" "block_count: 5"
}
t_pipe_through_gguf() {
    need "$G260"
    "$CONVERT" "$G260" -o - | "$CONVERT" - --to gguf -o - | "$CONVERT" --info --checksums - >"$TMP/out" || return 1
    diff <(grep '^  - {name:' "$TMP/out" | grep -v 'aux: true' | sort) <(tensors "$G260")
}

# ---- options ---------------------------------------------------------------
t_compress_round_trip() {
    need "$G260"
    "$CONVERT" "$G260" --compress=19 -o "$TMP/c.llm" && "$CONVERT" "$G260" -o "$TMP/u.llm" || return 1
    [ "$(stat -c %s "$TMP/c.llm")" -lt "$(stat -c %s "$TMP/u.llm")" ] || { echo "not smaller"; return 1; }
    expect 0 "$CONVERT" --verify "$TMP/c.llm" && diff <(tensors "$TMP/c.llm") <(tensors "$TMP/u.llm")
}
t_type_conversion() {
    need "$G260"
    "$CONVERT" "$G260" -t f16 -o "$TMP/h.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/h.llm" && has "$TMP/out" 'name: "blk.0.attn_q.weight", type: f16' &&
    has "$TMP/out" 'name: "blk.0.attn_norm.weight", type: f32'
}
t_meta_user_keys() {
    need "$G260"
    "$CONVERT" "$G260" --meta owner=me --meta note="two words" -o "$TMP/m.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/m.llm" && has "$TMP/out" "owner: me" && has "$TMP/out" "note: two words"
}
t_info_json_parses() {
    need "$G260"
    command -v python3 >/dev/null || skip "python3 is absent"
    "$CONVERT" --info --json "$G260" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["metadata"]["hparams"]["block_count"] == 5
assert d["totals"]["tensors"] == 48, d["totals"]
assert len([t for t in d["tensors"] if not t["aux"]]) == 48'
}
t_synthetic_deterministic() {
    "$CONVERT" --synthetic stories260k --seed 7 -o "$TMP/s1.llm" &&
    "$CONVERT" --synthetic stories260k --seed 7 -o "$TMP/s2.llm" &&
    "$CONVERT" --synthetic stories260k --seed 8 -o "$TMP/s3.llm" || return 1
    cmp -s "$TMP/s1.llm" "$TMP/s2.llm" && ! cmp -s "$TMP/s1.llm" "$TMP/s3.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/s1.llm" && has "$TMP/out" "block_count: 5"
}
t_synthetic_quantized_type() {
    "$CONVERT" --synthetic stories15m --type q4_0 -o "$TMP/q.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/q.llm" && has "$TMP/out" 'type: q4_0' && has "$TMP/out" "block_count: 6"
}
t_options_that_would_be_ignored_are_refused() {
    expect 2 "$CONVERT" x -o y --seed 3 && has "$TMP/err" "--seed goes with --synthetic" || return 1
    expect 2 "$CONVERT" --info x --meta a=b && has "$TMP/err" "make no sense with --info" || return 1
    need "$G260"
    expect 1 "$CONVERT" "$G260" --tokenizer "$TOK" -o "$TMP/x.llm" &&
    has "$TMP/err" "--tokenizer applies to llama2.c checkpoints" && [ ! -e "$TMP/x.llm" ] || return 1
    expect 1 "$CONVERT" "$G260" --type nf4 -o "$TMP/x.gguf" && has "$TMP/err" "has no GGUF form" &&
    [ ! -e "$TMP/x.gguf" ]
}
t_gguf_export_with_type() {
    need "$G260"
    "$CONVERT" "$G260" --type f16 -o "$TMP/h.gguf" || return 1
    expect 0 "$CONVERT" --info "$TMP/h.gguf" && has "$TMP/out" 'name: "blk.0.ffn_up.weight", type: f16' &&
    has "$TMP/out" 'name: "blk.0.ffn_norm.weight", type: f32'
}
# a sliding window and qwen3's q/k norms survive .llm -> GGUF -> .llm, and the
# window leaves as Mistral in a Hugging Face export
# --synthetic with --tokenizer: a random model that reads text (llama2.c's
# tokenizer of the shape's vocabulary size); another size is refused
t_synthetic_takes_a_tokenizer() {
    printf 'architecture: llama\nembedding_length: 64\nfeed_forward_length: 128\nblock_count: 1\nhead_count: 4\nhead_count_kv: 4\nvocab_size: 512\ncontext_length: 64\nrope_theta: 10000.0\nrms_norm_eps: 1e-5\ntie_embeddings: true\n' >"$TMP/s512.yaml"
    expect 0 "$CONVERT" --synthetic "$TMP/s512.yaml" --tokenizer "$DATA/llama2c/tok512.bin" -o "$TMP/s512.llm" &&
    expect 0 "$BIN/llm-run" -m "$TMP/s512.llm" -p "Once upon a time" -n 4 --temp 0 || return 1
    expect 1 "$CONVERT" --synthetic tests/unit/model/ref/qwen3.yaml --tokenizer "$DATA/llama2c/tok512.bin" -o "$TMP/s96.llm" &&
    has "$TMP/err" "tok512.bin: 4881 bytes after token 95: the tokenizer has more tokens than the model's vocab_size 96" &&
    [ ! -e "$TMP/s96.llm" ]
}
t_architectures_round_trip_through_gguf() {
    local y=tests/unit/model/ref
    "$CONVERT" --synthetic $y/mistral-swa.yaml -o "$TMP/swa.llm" &&
    "$CONVERT" "$TMP/swa.llm" -o "$TMP/swa.gguf" && "$CONVERT" "$TMP/swa.gguf" -o "$TMP/swa2.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/swa.gguf" && has "$TMP/out" "sliding_window: 5" || return 1
    expect 0 "$CONVERT" --info "$TMP/swa2.llm" && has "$TMP/out" "sliding_window: 5" || return 1
    [ "$(tensors "$TMP/swa.llm")" = "$(tensors "$TMP/swa2.llm")" ] || { echo "tensors differ"; return 1; }
    "$CONVERT" --synthetic $y/qwen3.yaml -o "$TMP/q3.llm" && "$CONVERT" "$TMP/q3.llm" -o "$TMP/q3.gguf" &&
    "$CONVERT" "$TMP/q3.gguf" -o "$TMP/q3b.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/q3b.llm" && has "$TMP/out" "architecture: qwen3" &&
    has "$TMP/out" 'name: "blk.2.attn_k_norm.weight", type: f32, shape: [32]' || return 1
    [ "$(tensors "$TMP/q3.llm")" = "$(tensors "$TMP/q3b.llm")" ] || { echo "tensors differ"; return 1; }
    # phi3: fused in the GGUF (as llama.cpp reads it), split again on import
    "$CONVERT" --synthetic $y/phi3.yaml -o "$TMP/p3.llm" && "$CONVERT" "$TMP/p3.llm" -o "$TMP/p3.gguf" &&
    "$CONVERT" "$TMP/p3.gguf" -o "$TMP/p3b.llm" || return 1
    grep -qa "blk.0.attn_qkv.weight" "$TMP/p3.gguf" && ! grep -qa "blk.0.attn_k.weight" "$TMP/p3.gguf" ||
        { echo "phi3 GGUF not fused"; return 1; }
    [ "$(tensors "$TMP/p3.llm")" = "$(tensors "$TMP/p3b.llm")" ] || { echo "phi3 tensors differ"; return 1; }
    # mixtures of experts: 3-D expert tensors and the expert keys; Mixtral is
    # "llama" with experts in GGUF
    for a in qwen3moe mixtral; do
        "$CONVERT" --synthetic $y/$a.yaml -o "$TMP/$a.llm" && "$CONVERT" "$TMP/$a.llm" -o "$TMP/$a.gguf" &&
        "$CONVERT" "$TMP/$a.gguf" -o "$TMP/${a}b.llm" || return 1
        expect 0 "$CONVERT" --info "$TMP/${a}b.llm" && has "$TMP/out" "expert_used_count:" &&
        has "$TMP/out" 'name: "blk.2.ffn_down_exps.weight", type: f32, shape: [' || return 1
        [ "$(tensors "$TMP/$a.llm")" = "$(tensors "$TMP/${a}b.llm")" ] || { echo "$a tensors differ"; return 1; }
    done
    expect 0 "$CONVERT" --info "$TMP/mixtralb.llm" && has "$TMP/out" "architecture: llama" || return 1
    # LongRoPE's factor tensors and keys
    "$CONVERT" --synthetic $y/phi3-longrope.yaml -o "$TMP/p3l.llm" && "$CONVERT" "$TMP/p3l.llm" -o "$TMP/p3l.gguf" &&
    "$CONVERT" "$TMP/p3l.gguf" -o "$TMP/p3lb.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/p3lb.llm" && has "$TMP/out" "original_context_length: 16" &&
    has "$TMP/out" 'name: "rope_factors_long.weight", type: f32, shape: [8]' || return 1
    [ "$(tensors "$TMP/p3l.llm")" = "$(tensors "$TMP/p3lb.llm")" ] || { echo "longrope tensors differ"; return 1; }
    # no rope.scaling.factor for LongRoPE: llama.cpp would scale every position by 1/factor on
    # top of the factor tensors
    ! grep -qa "rope.scaling.factor" "$TMP/p3l.gguf" || { echo "longrope GGUF has a scaling factor"; return 1; }
    # parts of different GGML types cannot be fused: refused, naming both, no file left
    printf 'default:\n  method: rtn\n  bits: 8\n  group: 32\nrules:\n  - match: "blk.*.attn_k.weight"\n    method: rtn\n    bits: 4\n    group: 32\n    sym: true\n' >"$TMP/p3mix.yaml"
    "$BIN/llm-quantize" -m "$TMP/p3.llm" -o "$TMP/p3mix.llm" --recipe "$TMP/p3mix.yaml" -q || return 1
    expect 1 "$CONVERT" "$TMP/p3mix.llm" -o "$TMP/p3mix.gguf" &&
    has "$TMP/err" "'blk.0.attn_k.weight' (q4_0, 64 wide) cannot join 'blk.0.attn_q.weight' (q8_0, 64 wide)" &&
    [ ! -e "$TMP/p3mix.gguf" ]
}
t_unknown_shape() { expect 1 "$CONVERT" --synthetic no-such-shape -o "$TMP/x.llm" && has "$TMP/err" "no-such-shape"; }


# ---- GPTQ / AWQ directories -------------------------------------------------
hfq_shape() {
    printf '%s\n' "architecture: llama" "embedding_length: 128" "feed_forward_length: 256" \
        "block_count: 2" "head_count: 4" "head_count_kv: 2" "vocab_size: 96" "context_length: 128" \
        "rope_theta: 10000.0" "rms_norm_eps: 0.00001" "tie_embeddings: false" >"$TMP/shape.yaml"
}
# blk.* tensors of two files: same names, types, shapes and checksums
hfq_same_blocks() {
    "$CONVERT" --info --checksums "$1" | grep '"blk\.' | sort >"$TMP/a.txt" &&
    "$CONVERT" --info --checksums "$2" | grep '"blk\.' | sort >"$TMP/b.txt" &&
    [ -s "$TMP/a.txt" ] && cmp -s "$TMP/a.txt" "$TMP/b.txt"
}
t_gptq_export_round_trip() {
    hfq_shape
    "$CONVERT" --synthetic "$TMP/shape.yaml" --type q4_g128 -o "$TMP/cv-syn.llm" || return 1
    expect 0 "$CONVERT" "$TMP/cv-syn.llm" --to gptq --dequant -o "$TMP/gptq" || return 1
    has "$TMP/gptq/config.json" '"quant_method": "gptq"' && has "$TMP/gptq/config.json" '"checkpoint_format": "gptq"' &&
    has "$TMP/gptq/quantize_config.json" '"group_size": 128' && [ -s "$TMP/gptq/model.safetensors" ] || return 1
    expect 0 "$CONVERT" "$TMP/gptq" -o "$TMP/r.llm" && hfq_same_blocks "$TMP/cv-syn.llm" "$TMP/r.llm" || return 1
    expect 0 "$CONVERT" --info "$TMP/r.llm" && has "$TMP/out" 'method: gptq' &&
    ! grep -q 'model\.layers' "$TMP/out"
}
t_gptq_v2_and_awq_round_trip() {
    hfq_shape
    "$CONVERT" --synthetic "$TMP/shape.yaml" --type q4_0 -o "$TMP/cv-syn.llm" || return 1
    expect 0 "$CONVERT" "$TMP/cv-syn.llm" --to gptq_v2 --dequant -o "$TMP/v2" &&
    has "$TMP/v2/config.json" '"checkpoint_format": "gptq_v2"' || return 1
    expect 0 "$CONVERT" "$TMP/v2" -o "$TMP/r2.llm" && hfq_same_blocks "$TMP/cv-syn.llm" "$TMP/r2.llm" || return 1
    expect 0 "$CONVERT" "$TMP/cv-syn.llm" --to awq --dequant -o "$TMP/awq" &&
    has "$TMP/awq/config.json" '"version": "gemm"' && [ ! -e "$TMP/awq/quantize_config.json" ] || return 1
    expect 0 "$CONVERT" "$TMP/awq" -o "$TMP/r3.llm" && hfq_same_blocks "$TMP/cv-syn.llm" "$TMP/r3.llm"
}
t_gptq_export_refusals() {
    hfq_shape
    "$CONVERT" --synthetic "$TMP/shape.yaml" --type q4_0 -o "$TMP/cv-syn.llm" || return 1
    # the embedding is q4_0: refused unless --dequant
    expect 1 "$CONVERT" "$TMP/cv-syn.llm" --to gptq -o "$TMP/refused" && has "$TMP/err" "tensor 'token_embd.weight'" &&
    has "$TMP/err" "--dequant" && [ ! -e "$TMP/refused" ] || return 1
    expect 1 "$CONVERT" "$TMP/cv-syn.llm" --to awq --type q8_0 --dequant -o "$TMP/refused" &&
    has "$TMP/err" "no linear weight of an integer grid type" && [ ! -e "$TMP/refused" ] || return 1
    expect 2 "$CONVERT" "$TMP/cv-syn.llm" --to gptq -o - && has "$TMP/err" "writes a directory" || return 1
    expect 2 "$CONVERT" "$TMP/cv-syn.llm" --dequant -o "$TMP/x.llm" && has "$TMP/err" "--dequant goes with" || return 1
    expect 2 "$CONVERT" "$TMP/cv-syn.llm" --to gptq --compress -o "$TMP/refused" && has "$TMP/err" "--compress applies"
}
t_gptq_bad_checkpoint_one_line() {
    hfq_shape
    "$CONVERT" --synthetic "$TMP/shape.yaml" --type q4_g64 -o "$TMP/cv-syn.llm" &&
    "$CONVERT" "$TMP/cv-syn.llm" --to gptq --dequant -o "$TMP/g" || return 1
    head -c 20000 "$TMP/g/model.safetensors" >"$TMP/cut" && mv "$TMP/cut" "$TMP/g/model.safetensors"
    expect 1 "$CONVERT" "$TMP/g" -o "$TMP/x.llm" && has "$TMP/err" "$TMP/g/model.safetensors" &&
    [ "$(wc -l <"$TMP/err")" = 1 ] && [ ! -e "$TMP/x.llm" ]
}
t_gptq_export_keeps_the_tokenizer() {
    need "$SMOL"
    expect 0 "$CONVERT" "$SMOL" --type q4_g128 --to gptq --dequant -o "$TMP/smol-gptq" || return 1
    [ -s "$TMP/smol-gptq/tokenizer.json" ] && has "$TMP/smol-gptq/tokenizer_config.json" '"eos_token": "<|im_end|>"' || return 1
    local text='Hello world! 12345 apples, $3.50 each.'
    "$BIN/llm-run" -m "$SMOL" --tokenize -p "$text" >"$TMP/t1" &&
    "$BIN/llm-run" -m "$TMP/smol-gptq" --tokenize -p "$text" >"$TMP/t2" && [ -s "$TMP/t1" ] && cmp -s "$TMP/t1" "$TMP/t2"
}

# ---- integrity (issue 17) ----------------------------------------------------
# A damaged tensor was copied under a new, good checksum: every output refuses
# it now, names the file and the tensor, and leaves nothing behind.
t_damaged_tensor_not_copied() {
    bad_llm || return 1
    local args
    for args in "-o $TMP/o.llm" "--compress -o $TMP/o.llm" "-t q8_0 -o $TMP/o.llm" \
                "-o $TMP/o.gguf" "--to gguf -o $TMP/o.llm"; do
        # shellcheck disable=SC2086
        expect 1 "$CONVERT" "$TMP/bad.llm" $args || return 1
        has "$TMP/err" "llm-convert: $TMP/$BAD_MSG" && one_line || return 1
        [ ! -e "$TMP/o.llm" ] && [ ! -e "$TMP/o.gguf" ] || { echo "output left by $args"; return 1; }
    done
    # on standard output nothing is written: all is checked first
    expect 1 "$CONVERT" "$TMP/bad.llm" -o - && has "$TMP/err" "$BAD_MSG" && [ ! -s "$TMP/out" ] &&
    expect 1 "$CONVERT" --info --checksums "$TMP/bad.llm" && has "$TMP/err" "$BAD_MSG" &&
    expect 1 "$CONVERT" --verify "$TMP/bad.llm" && has "$TMP/err" "$BAD_MSG"
}
t_nonfinite_weights_warned() {
    nan_llm || return 1
    expect 0 "$CONVERT" "$TMP/nan.llm" -o "$TMP/n2.llm" &&
    has "$TMP/err" "llm-convert: warning: $TMP/nan.llm: 1 NaN or infinite weight value in 1 tensor (the first: 'token_embd.weight')" &&
    one_line && expect 0 "$CONVERT" --verify "$TMP/nan.llm" && has "$TMP/out" "OK" &&
    has "$TMP/err" "warning" && expect 0 "$CONVERT" -q "$TMP/nan.llm" -o "$TMP/n3.llm" && [ ! -s "$TMP/err" ]
}
# Metadata of n keys took O(n^2) to read: 100,000 kept GGUF keys (an 8 MB
# header) took over 30 s to convert and again to open. The timeouts guard
# against that growth; they are not speed claims.
t_many_metadata_keys() {
    command -v python3 >/dev/null || skip "no python3"
    python3 - "$TMP/keys.gguf" <<'PY' || return 1
import struct, sys
kv = []
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv.append(s('general.architecture') + struct.pack('<I', 8) + s('llama'))
for i in range(100000):
    kv.append(s('x.key.%d' % i) + struct.pack('<II', 4, i))
open(sys.argv[1], 'wb').write(b'GGUF' + struct.pack('<IQQ', 3, 0, len(kv)) + b''.join(kv))
PY
    expect 0 timeout 60 "$CONVERT" "$TMP/keys.gguf" -o "$TMP/keys.llm" &&
    expect 0 timeout 30 "$CONVERT" --info "$TMP/keys.llm" && has "$TMP/out" "x.key.99999: 99999"
}
# A device as the model was copied to TMPDIR before its first byte was
# checked (6 GB in 5 s): now the header is checked first.
t_device_model_stops_at_the_header() {
    local dev
    mkdir -p "$TMP/spool"
    # /dev/zero is a legacy llama2.c header of zeros; /dev/urandom's ninth
    # byte is '{' one time in 256, and then it is a safetensors header, so
    # only the file's name is fixed there (CI once drew that byte).
    for dev in /dev/zero /dev/urandom; do
        expect 1 limited env TMPDIR="$TMP/spool" timeout 20 "$CONVERT" "$dev" -o "$TMP/x.llm" &&
        has "$TMP/err" "llm-convert: $dev: " && one_line || return 1
        [ "$dev" != /dev/zero ] || has "$TMP/err" "llm-convert: $dev: not a llama2.c checkpoint" ||
            return 1
        expect 1 limited env TMPDIR="$TMP/spool" timeout 20 "$CONVERT" --info "$dev" || return 1
        [ -z "$(ls -A "$TMP/spool")" ] || return 1
    done
}
t_stream_past_its_header_refused() {
    need "$G260"
    expect 1 limited timeout 20 sh -c "cat '$G260' /dev/zero | '$CONVERT' - -o '$TMP/x.llm'" &&
    has "$TMP/err" "<stdin>: the input goes on past the 1185376 bytes its header describes" &&
    one_line && [ ! -e "$TMP/x.llm" ]
}
# -o turned a FIFO, a device or a symlink into a regular file (as root,
# -o /dev/null replaced the system's).
t_output_fifo_stays_a_fifo() {
    need "$G260"
    mkfifo "$TMP/fifo" || skip "no mkfifo"
    timeout 60 cat "$TMP/fifo" >"$TMP/from-fifo" &  # an old build never opens it
    expect 0 "$CONVERT" "$G260" -o "$TMP/fifo" || return 1
    wait
    [ -p "$TMP/fifo" ] && expect 0 "$CONVERT" --verify "$TMP/from-fifo"
}
t_output_device_stays_a_device() {
    need "$G260"
    # a twin of /dev/null: an old build would rename its file over it
    mknod "$TMP/null" c 1 3 2>/dev/null || skip "cannot mknod (needs CAP_MKNOD)"
    expect 0 "$CONVERT" "$G260" -o "$TMP/null" && [ -c "$TMP/null" ] &&
    expect 0 "$CONVERT" "$G260" -o "$TMP/null" --to gguf && [ -c "$TMP/null" ]
}
t_output_symlink_stays_a_link() {
    need "$G260"
    mkdir -p "$TMP/real"
    ln -s real/m.llm "$TMP/link.llm" && ln -s real/m.gguf "$TMP/link.gguf" || return 1
    expect 0 "$CONVERT" "$G260" -o "$TMP/link.llm" && [ -L "$TMP/link.llm" ] && [ -f "$TMP/real/m.llm" ] &&
    expect 0 "$CONVERT" "$TMP/link.llm" -o "$TMP/link.gguf" && [ -L "$TMP/link.gguf" ] &&
    [ -f "$TMP/real/m.gguf" ] &&
    # written again: the target is replaced, the link stays
    expect 0 "$CONVERT" "$G260" -o "$TMP/link.llm" --meta a=b && [ -L "$TMP/link.llm" ] &&
    expect 0 "$CONVERT" --info "$TMP/real/m.llm" && has "$TMP/out" "a: b"
}
# A write error on stdout printed two lines.
t_stdout_write_error_one_line() {
    need "$G260"
    [ -w /dev/full ] || skip "no /dev/full"
    expect 1 sh -c "'$CONVERT' '$G260' -o - >/dev/full" && has "$TMP/err" "<stdout>: write error" &&
    one_line && expect 1 sh -c "'$CONVERT' --info '$G260' >/dev/full" &&
    has "$TMP/err" "llm-convert: <stdout>: write error" && one_line
}
