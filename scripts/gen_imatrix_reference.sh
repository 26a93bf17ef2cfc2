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
# FIXTURE OUTPUT [more llama-imatrix options]
run() {
  "$imatrix" -m "$root/tests/data/arch/$1/model.gguf" -f "$work/text.txt" -c 64 --chunks 8 -t 2 \
    -o "$out/$2" "${@:3}" > "$work/$2.log" 2>&1 || { cat "$work/$2.log"; exit 1; }
  grep "Final estimate" "$work/$2.log" | sed "s/^/$2: /"
}
run qwen2_moe qwen2_moe.gguf
run mixtral mixtral.gguf
# The legacy binary format (one call count per entry, values = mean x^2 x count) of the same run.
run qwen2_moe qwen2_moe.dat --output-format dat
# Latent attention: per-head 3-D attn_k_b / attn_v_b with one count for all heads. (llama.cpp
# reads q_lora_rank for every deepseek2 file whose layer count is not Lite's: the q_lora fixture.)
run deepseek2 deepseek2.gguf
