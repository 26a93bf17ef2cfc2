#!/usr/bin/env bash
# Fuzzes the GGUF reader for SECONDS (default 60).
#
#   scripts/run_fuzz.sh [SECONDS]
#
# Builds gguf_fuzz with clang into build/fuzz (incrementally), seeds build/fuzz/corpus with the
# shared models (../shared/models/*.gguf and llama.cpp-vocab/*.gguf up to 4 MB) and hand-made
# files, and runs libFuzzer. The corpus is kept, so later runs start from what earlier ones found.
# Exits non-zero when the fuzzer finds a crash, a sanitizer report, a leak, a timeout or an
# out-of-memory input; the input is saved in build/fuzz/artifacts/.
set -euo pipefail

seconds=${1:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]] || [[ $seconds -eq 0 ]]; then
  echo "usage: $0 [SECONDS]" >&2
  exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build/fuzz
models=$root/../shared/models
max_seed_bytes=$((4 * 1024 * 1024))

# CC/CXX only matter for the first configure; later runs reuse the cached compiler.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug \
  -DKESTREL_BUILD_FUZZ=ON -DKESTREL_BUILD_TESTS=OFF -DKESTREL_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j2 --target gguf_fuzz gguf_fuzz_seeds

corpus=$build/corpus
artifacts=$build/artifacts
mkdir -p "$corpus" "$artifacts"
"$build/fuzz/gguf_fuzz_seeds" "$corpus"
for model in "$models"/*.gguf "$models"/llama.cpp-vocab/*.gguf; do
  [[ -f $model ]] || continue
  if [[ $(stat -c %s "$model") -le $max_seed_bytes ]]; then
    cp -f "$model" "$corpus/seed-$(basename "$model")"
  fi
done

# Each input that parses is copied through GgufWriter into $TMPDIR; on disk, the writeback of
# those copies stalls the fuzzer, so use memory when there is some.
if [[ -d /dev/shm && -w /dev/shm ]]; then
  export TMPDIR=/dev/shm
fi

# -timeout: parsing a few MB takes well under a second, even instrumented.
status=0
"$build/fuzz/gguf_fuzz" "$corpus" \
  -dict="$root/fuzz/gguf.dict" \
  -max_total_time="$seconds" \
  -max_len="$max_seed_bytes" \
  -rss_limit_mb=2048 \
  -timeout=10 \
  -artifact_prefix="$artifacts/" \
  -print_final_stats=1 || status=$?

if [[ $status -ne 0 ]]; then
  echo "run_fuzz.sh: the fuzzer failed (exit $status); inputs are in $artifacts" >&2
fi
exit "$status"
