#!/usr/bin/env bash
# An "ssh" for Open MPI's rsh launcher that reaches the network namespaces of scripts/netns_hosts.sh:
#
#   mpirun --mca plm_rsh_agent /path/to/scripts/netns_rsh.sh --hostfile HOSTS ...
#
# Open MPI calls it as `AGENT [ssh options] HOST COMMAND...` and expects COMMAND to be run by a shell
# "on" HOST. Here HOST is an address of one kx-host* namespace (10.77.0.2) or its name (kx-host2);
# the command runs in that namespace, in a UTS namespace of its own whose hostname is the namespace
# name, so each "host" also has its own name (as MPI_Get_processor_name and Open MPI's node list see
# it). Everything else (files, processes, users) is shared with this machine, so the same binaries and
# models are "installed on every host".
set -euo pipefail

# Skip ssh-style options (Open MPI passes none by default; plm_rsh_args may add some).
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    -l|-p|-o|-i|-F|-E) shift 2 ;;  # options with a value
    *) shift ;;
  esac
done
[[ $# -ge 2 ]] || { echo "netns_rsh.sh: usage: netns_rsh.sh HOST COMMAND..." >&2; exit 255; }
host=$1
shift

ns=
if ip netns list | awk '{print $1}' | grep -qx -- "$host"; then
  ns=$host
else
  for candidate in $(ip netns list | awk '{print $1}' | grep -E '^kx-' || true); do
    if ip -n "$candidate" -4 -o addr show | awk '{print $4}' | grep -q "^${host//./\\.}/"; then
      ns=$candidate
      break
    fi
  done
fi
[[ -n $ns ]] || { echo "netns_rsh.sh: no kx- network namespace owns $host (scripts/netns_hosts.sh up?)" >&2; exit 255; }

# Like ssh: the words after HOST form one command line for the remote shell.
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1" && shift && exec sh -c "$*"' netns_rsh "$ns" "$@"
