#!/usr/bin/env bash
# One model over two "hosts" on this machine: network namespaces kx-host1 and kx-host2
# (scripts/netns_hosts.sh), the ranks started in them by Open MPI's own launcher
# (scripts/netns_mpirun.sh, scripts/netns_rsh.sh), talking TCP over veth pairs and a bridge. Checks:
#   - the ranks really run one per namespace (rank r in kx-host(r%2+1));
#   - --tp 2 across the hosts prints exactly the text of one process, its tp group reports plain
#     "mpi" (not "mpi (shared memory)"), and bytes cross the veths while it runs;
#   - --pp 2, and --tp 2 --pp 2 (four ranks, each tp group spanning both hosts), the same text.
#
#   tests/dist/test_netns_tcp.sh [KESTREL_BIN]      (ctest: dist_netns_tcp)
#
# Environment: KESTREL_BIN (the kestrel binary; the argument wins), KESTREL_SHARED_MODELS (default
# ../shared/models next to the repository), MPIRUN (default mpirun). Needs root and `ip netns`;
# without them it skips (exit 77, ctest's SKIP_RETURN_CODE). The namespaces are removed at exit,
# whatever happens.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
scripts=$repo/scripts
kestrel=${1:-${KESTREL_BIN:-$repo/build/debug/tools/kestrel}}
models=${KESTREL_SHARED_MODELS:-$repo/../shared/models}
model=$models/stories260K.gguf
prompt="Once upon a time"
gen=(-p "$prompt" -n 32 --temp 0 -t 1)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces (CI runs as root)"
if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then skip "ip netns is not available (iproute2)"; fi
command -v unshare >/dev/null || skip "no unshare (util-linux)"
command -v "${MPIRUN:-mpirun}" >/dev/null || fail "no mpirun (apt-get install openmpi-bin)"
[[ -x $kestrel ]] || fail "no kestrel binary at $kestrel (set KESTREL_BIN)"
[[ -f $model ]] || fail "no model at $model (set KESTREL_SHARED_MODELS)"

# One user of the kx- namespaces at a time (a debug and a release ctest, bench/collective_netns.sh).
lock=/run/lock/kestrel-netns.lock
[[ -d /run/lock && -w /run/lock ]] || lock=/tmp/kestrel-netns.lock
exec 9>"$lock"
flock -w 240 9 || fail "another netns test or benchmark has held the kx- namespaces for 4 minutes"

work=$(mktemp -d /tmp/kestrel-netns-test.XXXXXX)
cleanup() {
  local rc=$?
  "$scripts/netns_hosts.sh" down || echo "warning: netns_hosts.sh down failed" >&2
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$scripts/netns_hosts.sh" down
"$scripts/netns_hosts.sh" up 2

# The MPI library's allocations are reported as leaks at exit under ASan.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
mpirun_ns() { timeout -k 10 180 "$scripts/netns_mpirun.sh" -x ASAN_OPTIONS "$@"; }
veth_bytes() {
  local s=/sys/class/net/kx-h2-br/statistics
  [[ -d $s ]] || { echo 0; return; }
  echo $(($(cat $s/rx_bytes) + $(cat $s/tx_bytes)))
}

echo "== placement: one rank per namespace"
mpirun_ns -np 2 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK in $(ip netns identify $$)"' >"$work/place.out" 2>"$work/place.err" ||
  { cat "$work/place.err" >&2; fail "mpirun across the namespaces failed"; }
sort "$work/place.out"
if ! grep -qx "rank 0 in kx-host1" "$work/place.out" || ! grep -qx "rank 1 in kx-host2" "$work/place.out"; then
  fail "the ranks did not start one in kx-host1 and one in kx-host2"
fi

echo "== one process"
timeout 120 "$kestrel" run "$model" "${gen[@]}" >"$work/single.out" 2>"$work/single.err" ||
  { cat "$work/single.err" >&2; fail "single-process run failed"; }
[[ -s $work/single.out ]] || fail "single-process run printed no text"
cat "$work/single.out"; echo

# run_ns NAME NP EXPECTED_STARTUP_LINE KESTREL_ARGS...: run across the namespaces, compare the text.
run_ns() {
  local name=$1 np=$2 expect=$3
  shift 3
  echo "== $name across kx-host1/kx-host2 (-np $np)"
  local before after
  before=$(veth_bytes)
  if ! mpirun_ns -np "$np" "$kestrel" run "$model" "${gen[@]}" "$@" >"$work/$name.out" 2>"$work/$name.err"; then
    cat "$work/$name.err" >&2
    fail "$name: mpirun exited non-zero"
  fi
  after=$(veth_bytes)
  grep '^kestrel: ' "$work/$name.err" || true
  grep -q "^kestrel: $np ranks, $expect;" "$work/$name.err" ||
    { cat "$work/$name.err" >&2; fail "$name: no start-up line \"kestrel: $np ranks, $expect;\""; }
  if grep -q 'shared memory' "$work/$name.err"; then
    fail "$name: a group used shared memory, not TCP between the namespaces"
  fi
  echo "bytes through kx-h2-br during the run: $((after - before))"
  if ! cmp -s "$work/single.out" "$work/$name.out"; then
    echo "one process: $(cat "$work/single.out")" >&2
    echo "$name:        $(cat "$work/$name.out")" >&2
    fail "$name: the text differs from one process's"
  fi
  echo "same text as one process"
  last_bytes=$((after - before))
}

# The control traffic alone (mpirun <-> the daemons), to tell it from MPI messages between ranks.
before=$(veth_bytes)
mpirun_ns -np 2 true >/dev/null 2>&1 || fail "mpirun -np 2 true failed"
control_bytes=$(($(veth_bytes) - before))
echo "== control traffic of an empty job through kx-h2-br: $control_bytes bytes"

run_ns tp2 2 "tp 2 x pp 1 over mpi" --tp 2
# 32 tokens x (2 all-reduces per layer + the logits) of rank 1 cross kx-h2-br: well above the
# control traffic of an empty job.
((last_bytes > control_bytes + 20000)) ||
  fail "tp2: only $last_bytes bytes crossed kx-h2-br (an empty job: $control_bytes): not over the veths?"
run_ns pp2 2 "tp 1 x pp 2 over mpi" --pp 2
run_ns tp2pp2 4 "tp 2 x pp 2 over mpi" --tp 2 --pp 2
echo "PASS: --tp 2, --pp 2 and --tp 2 --pp 2 over TCP between network namespaces print one process's text"
