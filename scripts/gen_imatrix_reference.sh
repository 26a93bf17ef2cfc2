#!/usr/bin/env bash
# llama-imatrix's importance matrices of the tiny MoE fixtures, the reference for
# tests/e2e/imatrix_moe_test.cpp (`kestrel imatrix` on the same file and text must give the same
# entries, the same per-expert token counts, and the same sums to float rounding).
#
#   scripts/gen_imatrix_reference.sh LLAMA_IMATRIX
#
# LLAMA_IMATRIX: llama.cpp's llama-imatrix, built from llama-cpp-python 0.3.36's vendor/llama.cpp
# (cmake -DGGML_NATIVE=ON -DLLAMA_CURL=OFF, --target llama-imatrix). The text is the first 20,000
# bytes of ../shared/models/text/wikitext-2-test.txt, 8 chunks of 64 tokens.
set -euo pipefail
imatrix=${1:?usage: $0 LLAMA_IMATRIX}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/tests/data/imatrix
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 20000 "$root/../shared/models/text/wikitext-2-test.txt" > "$work/text.txt"
mkdir -p "$out"
for fixture in qwen2_moe mixtral; do
  "$imatrix" -m "$root/tests/data/arch/$fixture/model.gguf" -f "$work/text.txt" -c 64 --chunks 8 -t 2 \
    -o "$out/$fixture.gguf" > "$work/$fixture.log" 2>&1 || { cat "$work/$fixture.log"; exit 1; }
  grep "Final estimate" "$work/$fixture.log" | sed "s/^/$fixture: /"
done
