#!/usr/bin/env bash
# kestrel bench and llama-bench alternated on one GGUF file, ROUNDS times: pp64 and tg32, -t 2, each
# figure the median (kestrel) or mean (llama-bench) of 3 repetitions; prints one line per round.
#   LLAMA_BENCH=path/to/llama-bench bench/llamacpp_alternate.sh MODEL.gguf [ROUNDS]
# KESTREL_ARGS / LLAMA_BENCH_ARGS: extra flags for each (e.g. --mmap and -lm mmap: both engines
# mapping the file); KESTREL: another kestrel binary.
set -euo pipefail
M=$1; R=${2:-3}
LB=${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary}
K=${KESTREL:-$(cd "$(dirname "$0")/.." && pwd)/build/release/tools/kestrel}
KA=${KESTREL_ARGS:-}; LA=${LLAMA_BENCH_ARGS:-}
for ((r=1;r<=R;r++)); do
  k=$($K bench $M --pp 64 --tg 32 --batch 0 --reps 3 --no-bandwidth -t 2 --json $KA 2>/dev/null | python3 -c 'import json,sys; j=json.loads([l for l in sys.stdin if l.startswith("{")][-1]); print(j["pp"]["tok_s"], j["tg"]["tok_s"])')
  l=$($LB -m $M -p 64 -n 32 -t 2 -r 3 -o json $LA 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin); pp=[x["avg_ts"] for x in j if x["n_prompt"]>0][0]; tg=[x["avg_ts"] for x in j if x["n_gen"]>0][0]; print(pp, tg)')
  echo "round $r: kestrel${KA:+ $KA} pp/tg $k | llama.cpp${LA:+ $LA} pp/tg $l"
done
