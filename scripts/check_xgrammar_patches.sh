#!/usr/bin/env bash
# Checks that Kestrel's patches to xgrammar (cmake/xgrammar/patches) keep its token masks: builds
# xgrammar as published and as patched, walks every schema of bench/data/json_schemas.json (and a
# few counted-repetition regexes) with scripts/xgrammar_walk_masks.cc through both, and compares
# the masks at every step. Takes ~3 minutes on 2 cores (two builds of xgrammar).
#   scripts/check_xgrammar_patches.sh [VOCAB.gguf] [WALKS]   (default: Qwen2's vocabulary, 3 walks)
set -euo pipefail
cd "$(dirname "$0")/.."
vocab_gguf="${1:-../shared/models/llama.cpp-vocab/ggml-vocab-qwen2.gguf}"
walks="${2:-3}"
jobs="${JOBS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

published="$(KESTREL_DEPS_DIR="$work/published" KESTREL_XGRAMMAR_PATCHES=none scripts/fetch_xgrammar.sh)"
patched="$(KESTREL_DEPS_DIR="$work/patched" scripts/fetch_xgrammar.sh)"

# The vocabulary's tokens as bytes (GPT-2 byte-level pieces decoded; control tokens empty).
.venv/bin/python - "$vocab_gguf" > "$work/vocab.hex" <<'PY'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
f = r.fields["tokenizer.ggml.tokens"]
t = r.fields["tokenizer.ggml.token_type"]
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}
for i, j in zip(f.data, t.data):
    token, kind = bytes(f.parts[i]).decode("utf-8"), int(t.parts[j][0])
    if kind == 3: print("")                                   # control
    elif kind == 4: print(token.encode().hex())               # user-defined: as written
    else: print(bytes(byte_of[c] for c in token).hex())
PY

flags=(-O2 -std=c++17 -w -DXGRAMMAR_ENABLE_CPPTRACE=0 -DXGRAMMAR_ENABLE_INTERNAL_CHECK=0 -DXGRAMMAR_LOG_CUSTOMIZE=1)
for variant in published patched; do
  src="${!variant}"
  mkdir -p "$work/$variant.o"
  echo "check_xgrammar_patches: building xgrammar ($variant)" >&2
  find "$src/cpp" -name '*.cc' ! -path '*/tvm_ffi/*' | sort > "$work/$variant.sources"
  echo "$PWD/cmake/xgrammar/kestrel_log.cc" >> "$work/$variant.sources"
  xargs -P "$jobs" -I{} sh -c 'g++ "$@" -c "{}" -o "'"$work/$variant.o"'/$(echo "{}" | md5sum | cut -c1-12).o"' _ \
    "${flags[@]}" -I"$src/cpp" -Icmake/xgrammar -isystem "$src/include" -isystem "$src/3rdparty/picojson" \
    -isystem "$src/3rdparty/dlpack/include" < "$work/$variant.sources"
  g++ "${flags[@]}" -isystem "$src/include" -isystem "$src/3rdparty/picojson" -isystem "$src/3rdparty/dlpack/include" \
    scripts/xgrammar_walk_masks.cc "$work/$variant.o"/*.o -o "$work/walk_$variant" -lpthread
  "$work/walk_$variant" "$work/vocab.hex" bench/data/json_schemas.json "$walks" > "$work/$variant.txt"
done

steps=$(wc -l < "$work/published.txt")
if cmp -s "$work/published.txt" "$work/patched.txt"; then
  echo "check_xgrammar_patches: the same masks at all $steps steps"
else
  echo "check_xgrammar_patches: the masks differ; first difference:" >&2
  diff "$work/published.txt" "$work/patched.txt" | head -4 >&2
  exit 1
fi
