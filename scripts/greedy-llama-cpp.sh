#!/bin/bash
# greedy-llama-cpp.sh: llama.cpp's greedy tokens on the architecture tests'
# shapes, an independent check of transformers' (and so of ours: the unit
# test tests/unit/model/test_arch.c asserts we match the `greedy` line of
# each tests/unit/model/ref/NAME.txt). For each shape llama.cpp b4748 has
# the architecture of (qwen2; mistral-swa, exported as llama; gemma2 and
# gemma2-26; phi3; phi3-longrope; mixtral, exported as llama with experts;
# qwen2moe; not qwen3, gemma3 nor qwen3moe, which came after it) it makes the model as
# the unit test and scripts/ref-transformers.py do (--synthetic, f32, seed
# 7), exports it to GGUF, and runs scripts/llama-greedy.c on it (weight
# matrices x12 as llm_test_scale_weights, the .txt's 24-token prompt, 8
# greedy tokens). It prints, per shape: transformers' and llama.cpp's
# tokens, whether they match, the first token that differs and llama.cpp's
# top-1 margin there (else its smallest), and the first prompt position
# whose logits differ from transformers' by more than 1e-5 of the largest
# (the unit test's tolerance) with the largest difference, or why llama.cpp
# did not run it. llama.cpp b4748 reads no sliding window for llama, so
# mistral-swa (window 5) agrees over the prompt's first 5 positions only;
# its gemma2 takes the query scale from the model type, known for 26, 42
# and 46 layers only, and aborts on gemma2's 4 (gemma2-26 has 26).
#
#   LLAMA_CPP=/path/llama.cpp scripts/greedy-llama-cpp.sh [--save] [DIR]
#
# LLAMA_CPP is a llama.cpp source tree built with CMake (headers in
# include/ and ggml/include/, libllama.so and libggml*.so in
# LLAMA_CPP_LIB, default $LLAMA_CPP/build/bin). DIR (default
# build/greedy-llama-cpp) receives the models, llama-greedy, its logits and
# messages. With --save, tests/unit/model/ref/NAME.llamacpp gets a comment
# line (llama.cpp's version and commit, the command, whether it matches
# transformers) and the line `greedy T1 ... T8` for each shape llama.cpp
# ran. Environment: ARCHS (the shapes above), BIN (bin: llm-convert, built
# beforehand with make), CC (cc). Run from the repository root.
set -eu
save=0
if [ "${1:-}" = --save ]; then save=1; shift; fi
lc=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp source tree built with CMake}
lib=${LLAMA_CPP_LIB:-$lc/build/bin}
dir=${1:-build/greedy-llama-cpp}
bin=${BIN:-bin}
archs=${ARCHS:-"qwen2 mistral-swa gemma2 gemma2-26 phi3 phi3-longrope mixtral qwen2moe"}
ref=tests/unit/model/ref
[ -d "$ref" ] || { echo "greedy-llama-cpp: run from the repository root" >&2; exit 1; }
[ -x "$bin/llm-convert" ] || { echo "greedy-llama-cpp: no $bin/llm-convert (make it first)" >&2; exit 1; }
if [ ! -r "$lc/include/llama.h" ] || [ ! -r "$lib/libllama.so" ]; then
    echo "greedy-llama-cpp: no llama.h in $lc/include or libllama.so in $lib" >&2
    exit 1
fi
if git -C "$lc" rev-parse --git-dir >/dev/null 2>&1; then
    version="b$(git -C "$lc" rev-list --count HEAD) $(git -C "$lc" rev-parse --short=8 HEAD)"
else
    version="(version unknown)"
fi
mkdir -p "$dir"
"${CC:-cc}" -O2 -std=c11 -o "$dir/llama-greedy" scripts/llama-greedy.c -I"$lc/include" \
    -I"$lc/ggml/include" -L"$lib" -lllama -lggml -lggml-base -Wl,-rpath,"$lib" -lm

# NAME.txt's line KEY without the key
line() { sed -n "s/^$2 //p" "$ref/$1.txt"; }

printf '%-14s %-26s %-26s %-5s %s\n' shape transformers llama.cpp match \
    "first difference (llama.cpp margin) / prompt logits"
for a in $archs; do
    "$bin/llm-convert" --synthetic "$ref/$a.yaml" --type f32 --seed 7 -o "$dir/$a.llm" -q
    "$bin/llm-convert" "$dir/$a.llm" -o "$dir/$a.gguf" -q
    prompt=$(line "$a" prompt)
    want=$(line "$a" greedy)
    # (the braces keep bash's own "Aborted" off the terminal)
    # shellcheck disable=SC2086
    { GGML_NO_BACKTRACE=1 "$dir/llama-greedy" --scale 12 --logits "$dir/$a.logits" \
        "$dir/$a.gguf" $prompt >"$dir/$a.out" 2>"$dir/$a.err"; } 2>/dev/null && rc=0 || rc=$?
    if [ "$rc" != 0 ]; then
        why=$(grep -E 'error|fatal|abort' "$dir/$a.err" | grep -v '^llama-greedy:' | head -n 1 |
            sed "s|$lc/||")
        printf '%-14s %-26s %-26s %-5s %s\n' "$a" "$want" "-" "-" \
            "did not run (exit $rc): ${why:-see $dir/$a.err}"
        continue
    fi
    got=$(sed -n 's/^greedy //p' "$dir/$a.out")
    margins=$(sed -n 's/^margin //p' "$dir/$a.out")
    # the first differing token and llama.cpp's margin there, else the
    # smallest margin; then the prompt's logits against transformers'
    read -r match diff < <(awk -v w="$want" -v g="$got" -v m="$margins" 'BEGIN {
        n = split(w, x); split(g, y); split(m, z); lo = 0
        for (i = 1; i <= n; i++) {
            if (x[i] != y[i]) { printf "no token %d (%s)\n", i - 1, z[i]; exit }
            if (!lo || z[i] < z[lo]) lo = i
        }
        printf "yes min margin %s\n", z[lo]
    }')
    logits=$(awk '
        FNR == NR { if ($1 ~ /^#/ || $1 == "prompt" || $1 == "greedy") next
                    r++; for (i = 1; i <= NF; i++) { ref[r, i] = $i; v = $i < 0 ? -$i : $i; if (v > mx) mx = v }
                    next }
        { p++; e = 0
          for (i = 1; i <= NF; i++) { d = $i - ref[p, i]; if (d < 0) d = -d; if (d > e) e = d }
          if (e > worst) worst = e
          if (!first && e > 1e-5 * mx) first = p }
        END { if (p != r) { print "logits: " p " rows, transformers " r; exit }
              if (first) printf "logits differ from position %d (max %.2g)\n", first - 1, worst / mx
              else printf "logits all %d within 1e-5 (max %.2g)\n", p, worst / mx }' \
        "$ref/$a.txt" "$dir/$a.logits")
    printf '%-14s %-26s %-26s %-5s %s; %s\n' "$a" "$want" "$got" "$match" "$diff" "$logits"
    if [ $save = 1 ]; then
        if [ "$match" = yes ]; then same="same as $a.txt (transformers)"
        else same="differs from $a.txt (transformers) from ${diff%% (*}"; fi
        {
            echo "# llama.cpp $version: LLAMA_CPP=... scripts/greedy-llama-cpp.sh --save" \
                "(llama-greedy --scale 12 on $a.yaml, --synthetic f32 seed 7, the prompt of $a.txt); $same"
            echo "greedy $got"
        } >"$ref/$a.llamacpp"
    fi
done
