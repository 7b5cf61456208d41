#!/bin/sh
# fuzz.sh SECONDS: build every libFuzzer target in tests/fuzz with clang
# (ASan + UBSan) and run each for SECONDS, seeded with real files.
set -eu
secs=${1:-20}
scripts/deps.sh fuzz
out=build-fuzz
mkdir -p "$out"
cflags="-std=c11 -D_GNU_SOURCE -DLLM_FUZZING -g -O1 -fsanitize=fuzzer-no-link,address,undefined,float-cast-overflow -fno-sanitize-recover=all $(pkg-config --cflags yaml-0.1 libzstd libxxhash jansson libpcre2-8 libutf8proc)"
libs="$(pkg-config --libs yaml-0.1 libzstd libxxhash jansson libpcre2-8 libutf8proc) -lm -lpthread"
# the library, CPU only, built with clang and the sanitizers
objs=
# an object is stale when its source or any library header is newer
newest_h=$(ls -t lib/*.h lib/*/*.h | head -1)
for src in lib/*/*.c; do
    case $src in lib/gpu/cuda.c) continue ;; esac
    o=$out/$(echo "$src" | tr / _).o
    if [ ! -f "$o" ] || [ "$src" -nt "$o" ] || [ "$newest_h" -nt "$o" ]; then
        clang $cflags -c "$src" -o "$o"
    fi
    objs="$objs $o"
done
data=${LLM_DATA:-../shared/data}
# Seeds that are whole models are made here, not kept in the repository:
# from the small synthetic .llm seed of fuzz_llm (f32, 16 wide) in other
# types and as GGUF, and from the shared stories260K (with its tokenizer).
make --no-print-directory bin/llm-convert >/dev/null
gen=$out/model-seeds
mkdir -p "$gen"
tiny=tests/fuzz/seeds/fuzz_llm/tiny.seed
conv() { [ -s "$1" ] || { o=$1; shift; bin/llm-convert "$@" -q -o "$o"; }; }
conv "$gen/tiny-f16.llm" "$tiny" --type f16
conv "$gen/tiny-q4_0.llm" "$tiny" --type q4_0
conv "$gen/tiny-q8ch-zstd.llm" "$tiny" --type q8_ch --compress
conv "$gen/tiny.gguf" "$tiny"
# every architecture's small shape as GGUF (phi3's fused tensors, the
# experts' 3-D tensors and keys, windows, soft-caps)
for y in tests/unit/model/ref/*.yaml; do
    conv "$gen/arch-$(basename "$y" .yaml).gguf" --synthetic "$y" --type f16
done
if [ -r "$data/llama2c/stories260K.bin" ] && [ -r "$data/llama2c/tok512.bin" ]; then
    conv "$gen/s260-q4_0.llm" "$data/llama2c/stories260K.bin" --tokenizer "$data/llama2c/tok512.bin" --type q4_0
fi
fail=0 n=0
for t in tests/fuzz/fuzz_*.c; do
    name=$(basename "$t" .c)
    clang $cflags -fsanitize=fuzzer "$t" $objs $libs -o "$out/$name"
    corpus=$out/corpus-$name
    mkdir -p "$corpus"
    # seeds: the checked-in ones, plus real files of the right kind
    [ -d "tests/fuzz/seeds/$name" ] && cp -n tests/fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null || true
    maxlen=65536
    case $name in
    fuzz_gguf | fuzz_model)
        maxlen=524288 # the architectures' seeds, up to 450 KB
        cp -n "$data"/gguf/*.gguf "$corpus"/ 2>/dev/null || true
        cp -n "$gen"/arch-*.gguf "$corpus"/ ;;
    fuzz_head)
        cp -n "$data"/gguf/*.gguf "$gen"/tiny.gguf "$gen"/tiny-f16.llm "$corpus"/ 2>/dev/null || true
        for f in tests/fuzz/seeds/fuzz_gguf/* tests/fuzz/seeds/fuzz_llama2c/*; do
            cp -n "$f" "$corpus/$(basename "$(dirname "$f")")-$(basename "$f")"
        done ;;
    fuzz_llm_sums)
        # stories260K (167 KB) carries the tokenizer the tiny seeds lack
        maxlen=262144
        cp -n "$tiny" "$corpus"/tiny-f32.llm
        cp -n "$gen"/*.llm "$corpus"/ 2>/dev/null || true ;;
    fuzz_llama2c) cp -n "$data"/llama2c/*.bin "$corpus"/ 2>/dev/null || true ;;
    fuzz_spm) cp -n "$data"/llama2c/tok512.model "$corpus"/ 2>/dev/null || true ;;
    esac
    echo "== $name (${secs}s)"
    n=$((n + 1))
    if ! "$out/$name" -max_total_time="$secs" -max_len="$maxlen" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=0 "$corpus" >"$out/$name.log" 2>&1; then
        fail=$((fail + 1))
        echo "FAIL $name: see $out/$name.log"
        tail -30 "$out/$name.log"
    else
        grep -E '^#[0-9]+.*DONE' "$out/$name.log" | tail -1 || true
    fi
done
echo "fuzz: $((n - fail)) passed, $fail failed"
[ $fail = 0 ]
