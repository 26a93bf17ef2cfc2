#!/usr/bin/env bash
# mpirun across the "hosts" of scripts/netns_hosts.sh (network namespaces kx-host1, kx-host2, ...),
# over TCP, with Open MPI's own launcher: its daemons (orted) are started in the namespaces by
# scripts/netns_rsh.sh in place of ssh, and connect back to this mpirun over the bridge.
#
#   scripts/netns_hosts.sh up
#   scripts/netns_mpirun.sh -np 2 build/release/tools/kestrel run MODEL -p "..." --tp 2
#   scripts/netns_hosts.sh down
#
# Ranks go round-robin over the hosts (--map-by node): rank 0 on kx-host1, rank 1 on kx-host2,
# rank 2 on kx-host1, ... so a --tp 2 group spans two hosts. Extra mpirun options go before the
# program as usual (-x VAR, --report-bindings, ...). MPIRUN overrides the mpirun binary.
#
# The options, and why:
#   --host 10.77.0.1:8,10.77.0.2:8  the namespaces' addresses (8 slots each: -np up to 16 without
#                                   --oversubscribe); addresses, not names, so netns_rsh.sh can find
#                                   the namespace that owns them
#   plm_rsh_agent                   netns_rsh.sh instead of ssh
#   plm_rsh_no_tree_spawn 1         mpirun starts every daemon itself (no daemon-to-daemon ssh)
#   pml ob1, btl tcp,self           MPI traffic over TCP only: no shared memory (vader) and no UCX,
#                                   which brings its own shared-memory transports
#   btl_tcp_if_include, oob_tcp_if_include 10.77.0.0/24
#                                   MPI messages and the daemons' control traffic over the veths
#                                   only, never eth0 or lo
#   --bind-to none                  each "host" believes it has every core of this machine, so the
#                                   default binding (to core) puts rank 0 of kx-host1 and rank 0 of
#                                   kx-host2 both on core 0, and a spinning rank then waits for a
#                                   whole scheduler slice (~5 ms per collective instead of ~30 us)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prefix=${KX_NETNS_PREFIX:-10.77.0}

hosts=()
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^kx-host[0-9]+$' | sort -V || true); do
  hosts+=("${prefix}.${ns#kx-host}:${KX_NETNS_SLOTS:-8}")
done
if [[ ${#hosts[@]} -eq 0 ]]; then
  echo "netns_mpirun.sh: no kx-host namespaces: run scripts/netns_hosts.sh up first (as root)" >&2
  exit 1
fi

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

exec "${MPIRUN:-mpirun}" \
  --host "$(IFS=,; echo "${hosts[*]}")" --map-by node --bind-to none \
  --mca plm_rsh_agent "$here/netns_rsh.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca pml ob1 --mca btl tcp,self \
  --mca btl_tcp_if_include "${prefix}.0/24" --mca oob_tcp_if_include "${prefix}.0/24" \
  "$@"
