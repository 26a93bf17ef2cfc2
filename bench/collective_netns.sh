#!/usr/bin/env bash
# Collective latency between two ranks, on one host (kestrel's shared-memory path) and between two
# "hosts" over TCP (network namespaces kx-host1/kx-host2 joined by veths, scripts/netns_hosts.sh,
# the ranks started there by Open MPI's launcher, scripts/netns_mpirun.sh). Prints both tables of
# bench/collective_bench.cpp (p50/p90/p99 in microseconds, from rank 0).
#
#   bench/collective_netns.sh [--iters 2000] [--floats 4096]       (root, for the namespaces)
#
# COLLECTIVE_BENCH overrides the binary (default build/release/bench/collective_bench). Targets
# (issue 17): the decode row's all-reduce p50 <= 30 us over shared memory, <= 150 us over TCP.
# Two spinning ranks need both cores of a 2-core machine: run it on an otherwise idle machine
# (the load average is printed with the tables).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
bench=${COLLECTIVE_BENCH:-$repo/build/release/bench/collective_bench}
args=("$@")
[[ " ${args[*]} " == *" --iters "* ]] || args+=(--iters 2000)
[[ -x $bench ]] || { echo "no $bench: build it (cmake --build build/release --target collective_bench)" >&2; exit 1; }
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
echo
echo "== one host: mpirun -np 2 (kestrel's shared-memory collectives)"
timeout -k 10 600 mpirun -np 2 "$bench" "${args[@]}"
echo
echo "== one host, MPI's own messages (KESTREL_COMM_SHM=0: Open MPI's vader BTL), for reference"
KESTREL_COMM_SHM=0 timeout -k 10 600 mpirun -np 2 -x KESTREL_COMM_SHM "$bench" "${args[@]}"
echo

if [[ $(id -u) -ne 0 ]] || ! ip netns list >/dev/null 2>&1; then
  echo "== two hosts over TCP: skipped (needs root and ip netns)"
  exit 0
fi
lock=/run/lock/kestrel-netns.lock
[[ -d /run/lock && -w /run/lock ]] || lock=/tmp/kestrel-netns.lock
exec 9>"$lock"
flock -w 600 9 || { echo "the kx- namespaces are busy (tests/dist/test_netns_tcp.sh?)" >&2; exit 1; }
trap '"$repo/scripts/netns_hosts.sh" down' EXIT
trap 'exit 130' INT TERM
"$repo/scripts/netns_hosts.sh" down
"$repo/scripts/netns_hosts.sh" up 2
echo "== two hosts over TCP: scripts/netns_mpirun.sh -np 2 (kx-host1 10.77.0.1, kx-host2 10.77.0.2, veths + bridge)"
# (Open MPI's rsh launcher may warn "setpgid(...) failed in parent": harmless, filtered out.)
timeout -k 10 600 "$repo/scripts/netns_mpirun.sh" -np 2 "$bench" "${args[@]}" 2> >(grep -v 'setpgid' >&2)
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
