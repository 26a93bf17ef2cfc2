#!/usr/bin/env bash
# Tensor parallelism's overhead where it cannot add compute: TP=2 with one thread per rank against
# one process with two threads, decode (and prompt) on the same model, the two alternated ROUNDS
# times; prints each round's figures and the median of the pairwise ratios (TP / one process).
#
#   bench/tp_overhead.sh MODEL [ROUNDS] [extra kestrel bench options...]
#   e.g. bench/tp_overhead.sh ~/.cache/kestrel/models/gemma-3-270m-q4_k_m.gguf 6 --tp-deterministic
#   PP=64 TG=16 bench/tp_overhead.sh BIG.gguf 3   (prompt and generated tokens; default 64 and 64)
#
# Needs a Release build (build/release/tools/kestrel) and Open MPI. The ranks are not bound
# (--bind-to none): with one thread each the OS spreads them over the cores, as it does the one
# process's two threads.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/tp_overhead.sh MODEL [ROUNDS] [extra bench options]}
rounds=${2:-6}
shift $(($# >= 2 ? 2 : 1))
kestrel=${KESTREL:-build/release/tools/kestrel}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(bench "$model" --pp "${PP:-64}" --tg "${TG:-64}" --batch 0 --reps 3 --no-bandwidth --json "$@")

figure() {  # the JSON line's pp and tg medians
  python3 -c 'import json,sys; j=json.loads([l for l in sys.stdin if l.startswith("{")][-1]); print(j["pp"]["tok_s"], j["tg"]["tok_s"])'
}

one=() tp=()
for ((r = 1; r <= rounds; r++)); do
  a=$("$kestrel" "${common[@]}" -t 2 | figure)
  b=$(mpirun -np 2 --bind-to none "$kestrel" "${common[@]}" -t 1 --tp 2 | figure)
  echo "round $r: one process -t 2: pp/tg $a tok/s | --tp 2 -t 1: pp/tg $b tok/s"
  one+=("$a") tp+=("$b")
done
python3 - "${one[@]}" -- "${tp[@]}" <<'EOF'
import statistics, sys
args = sys.argv[1:]
cut = args.index("--")
one = [tuple(map(float, s.split())) for s in args[:cut]]
tp = [tuple(map(float, s.split())) for s in args[cut + 1:]]
for i, name in ((0, "prompt"), (1, "decode")):
    ratios = [b[i] / a[i] for a, b in zip(one, tp)]
    print(f"{name}: median one process {statistics.median(a[i] for a in one):.1f} tok/s, "
          f"--tp 2 {statistics.median(b[i] for b in tp):.1f} tok/s, "
          f"median of pairwise ratios {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
EOF
