#!/usr/bin/env bash
# lm-evaluation-harness (`local-completions`) against `kestrel serve`, offline: a loglikelihood
# multiple-choice task scored through /v1/completions prompt scoring (echo + logprobs).
#
# Setup, once (the venv lives outside the repository; lm_eval 0.4.9 needs transformers 4.x:
# with transformers 5 it fails on import, AttributeError: AutoModelForVision2Seq):
#   python3 -m venv ../lmeval-venv
#   ../lmeval-venv/bin/pip install 'lm_eval[api]==0.4.9' transformers==4.57.6 datasets==3.6.0 gguf==0.19.0
#   cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DKESTREL_BUILD_TESTS=OFF
#   cmake --build build/release -j2 --target kestrel
# This script then does the rest, each step skipped when its output exists:
#   1. the HF tokenizer, read from the GGUF (no HF tokenizer folder is needed or downloaded):
#        ../lmeval-venv/bin/python bench/lm_eval/export_tokenizer.py MODEL.gguf WORK/tokenizer-NAME
#   2. the task data (200 items from ../shared/models/text/tinystories_val.txt, seed 1234):
#        python3 bench/lm_eval/make_task.py WORK/data
#   3. starts build/release/tools/kestrel serve MODEL --port 0 and reads the port from its
#      "serving ... on http://HOST:PORT" line,
#   4. checks the HF tokenizer's ids against the server's POST /tokenize (bench/lm_eval/check_tokenizer.py)
#      and stops on a difference unless ALLOW_TOKENIZER_MISMATCH=1: with tokenized_requests=True the
#      server scores lm-eval's ids as given, so a different tokenizer means scores of a tokenization
#      the model does not use (with tokenized_requests=False, lm-eval's context lengths would be
#      wrong). Qwen2.5's GGUF converts exactly; Gemma 3's does not with transformers 4.57.6 (it
#      becomes a Unigram tokenizer that splits "Once upon" as On|ce|▁up|on, the server Once|▁upon),
#   5. runs lm_eval --model local-completions ... --tasks kestrel_task --include_path bench/lm_eval,
#   6. stops the server with SIGTERM and prints lm-eval's table.
#
# Usage: bench/lm_eval/run.sh [MODEL.gguf]   (default ~/.cache/kestrel/models/qwen2.5-coder-0.5b-instruct.gguf)
# Environment: LIMIT (items, default 200), THREADS (server compute threads, default 2),
#   VENV (default ../lmeval-venv), WORK (tokenizer, data and results; default ../lmeval-work),
#   KV_MIB (server KV-cache memory, default 1024), BATCH_SIZE (prompts per request, default 1),
#   KESTREL (default build/release/tools/kestrel), EXTRA_MODEL_ARGS (appended to --model_args, e.g.
#   ",add_bos_token=True" for a model whose prompts start with BOS such as Gemma: lm-eval's
#   local-completions sends no BOS by default), ALLOW_TOKENIZER_MISMATCH (1: go on after step 4 fails).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
MODEL=$(realpath "${1:-$HOME/.cache/kestrel/models/qwen2.5-coder-0.5b-instruct.gguf}")
NAME=$(basename "$MODEL" .gguf)
LIMIT=${LIMIT:-200}
THREADS=${THREADS:-2}
KV_MIB=${KV_MIB:-1024}
BATCH_SIZE=${BATCH_SIZE:-1}
VENV=$(realpath -m "${VENV:-$ROOT/../lmeval-venv}")
WORK=$(realpath -m "${WORK:-$ROOT/../lmeval-work}")
KESTREL=${KESTREL:-$ROOT/build/release/tools/kestrel}
PY=$VENV/bin/python
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost

for f in "$MODEL" "$KESTREL" "$PY" "$VENV/bin/lm_eval"; do
  [[ -e $f ]] || { echo "run.sh: missing $f (see the setup at the top of $0)" >&2; exit 1; }
done
mkdir -p "$WORK"
TOKENIZER=$WORK/tokenizer-$NAME
DATA=$WORK/data
[[ -f $TOKENIZER/tokenizer.json ]] || "$PY" bench/lm_eval/export_tokenizer.py "$MODEL" "$TOKENIZER"
[[ -f $DATA/test.jsonl ]] || "$PY" bench/lm_eval/make_task.py "$DATA"

SERVER_LOG=$WORK/server-$NAME.log
"$KESTREL" serve "$MODEL" --host 127.0.0.1 --port 0 -t "$THREADS" --kv-memory-mib "$KV_MIB" \
  --served-model-name "$NAME" 2> "$SERVER_LOG" &
SERVER_PID=$!
stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
  fi
}
trap stop_server EXIT
PORT=
for _ in $(seq 600); do
  PORT=$(sed -n 's/.*serving .* on http:\/\/.*:\([0-9][0-9]*\).*/\1/p' "$SERVER_LOG" | head -1)
  [[ -n $PORT ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$SERVER_LOG" >&2; echo "run.sh: the server exited" >&2; exit 1; }
  sleep 0.1
done
[[ -n $PORT ]] || { cat "$SERVER_LOG" >&2; echo "run.sh: no port after 60 s" >&2; exit 1; }
echo "run.sh: kestrel serve $NAME on port $PORT (pid $SERVER_PID)"

"$PY" bench/lm_eval/check_tokenizer.py "$TOKENIZER" "http://127.0.0.1:$PORT" --task-jsonl "$DATA/test.jsonl" \
  || { [[ ${ALLOW_TOKENIZER_MISMATCH:-0} == 1 ]] || { echo "run.sh: the HF tokenizer and the server's differ (above); ALLOW_TOKENIZER_MISMATCH=1 goes on anyway" >&2; exit 1; }
       echo "run.sh: the tokenizers differ; going on (ALLOW_TOKENIZER_MISMATCH=1): scores are for lm-eval's tokenization"; }

OUT=$WORK/results
START=$(date +%s)
"$VENV/bin/lm_eval" --model local-completions \
  --model_args "model=$NAME,base_url=http://127.0.0.1:$PORT/v1/completions,tokenizer=$TOKENIZER,num_concurrent=1,max_retries=1,tokenized_requests=True${EXTRA_MODEL_ARGS:-}" \
  --tasks kestrel_task --include_path bench/lm_eval --metadata "{\"data_dir\": \"$DATA\"}" \
  --batch_size "$BATCH_SIZE" --limit "$LIMIT" --log_samples --output_path "$OUT" 2>&1 | tee "$WORK/lm_eval-$NAME.log"
SECONDS_TAKEN=$(( $(date +%s) - START ))

stop_server
trap - EXIT
echo
echo "run.sh: $NAME, $LIMIT items, lm_eval took ${SECONDS_TAKEN} s; results and samples under $OUT"
grep '^|' "$WORK/lm_eval-$NAME.log"
