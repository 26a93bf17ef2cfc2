#!/usr/bin/env bash
# Two (or more) "hosts" on this machine: Linux network namespaces kx-host1, kx-host2, ... joined by
# veth pairs to a bridge in the root namespace, so that MPI ranks started in them talk TCP over a
# real (virtual) link instead of shared memory. scripts/netns_rsh.sh starts Open MPI's daemons in
# them; tests/dist/test_netns_tcp.sh and bench/collective_netns.sh use both.
#
#   scripts/netns_hosts.sh up [N]     create kx-host1..kx-hostN (default 2); idempotent
#   scripts/netns_hosts.sh down       remove every kx-host* namespace, kx-br0 and the kx-* veths
#   scripts/netns_hosts.sh status     show what exists
#   scripts/netns_hosts.sh hostfile [SLOTS]   print an mpirun hostfile for the hosts that are up
#
# Layout (all names start with kx- so nothing else on the machine is touched):
#   root namespace : bridge kx-br0 10.77.0.254/24 (mpirun stays here and is reachable from every host)
#   kx-hostI       : lo up, kx-eth0 10.77.0.I/24, its peer kx-hI-br enslaved to kx-br0
# Needs root (CAP_NET_ADMIN) and iproute2 with `ip netns`.
set -euo pipefail

SUBNET_PREFIX=${KX_NETNS_PREFIX:-10.77.0}
BRIDGE=kx-br0
BRIDGE_ADDR=${SUBNET_PREFIX}.254/24

die() { echo "netns_hosts.sh: $*" >&2; exit 1; }

check_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root (creates network namespaces)"
  command -v ip >/dev/null || die "no ip command (install iproute2)"
  ip netns list >/dev/null 2>&1 || die "ip netns is not available here"
}

ns_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }
link_exists() { ip link show "$1" >/dev/null 2>&1; }

up() {
  local count=${1:-2}
  [[ $count =~ ^[0-9]+$ && $count -ge 1 && $count -le 250 ]] || die "bad host count: $count"
  if ! link_exists "$BRIDGE"; then
    ip link add "$BRIDGE" type bridge
  fi
  # No STP delay: ports forward at once.
  ip link set "$BRIDGE" type bridge forward_delay 0 stp_state 0 2>/dev/null || true
  ip addr replace "$BRIDGE_ADDR" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local i ns veth
  for ((i = 1; i <= count; i++)); do
    ns=kx-host$i
    veth=kx-h$i-br
    ns_exists "$ns" || ip netns add "$ns"
    if ! ip -n "$ns" link show kx-eth0 >/dev/null 2>&1; then
      # A half-made pair from an interrupted run: start that host's link again.
      link_exists "$veth" && ip link del "$veth"
      ip link add "$veth" type veth peer name kx-eth0 netns "$ns"
    fi
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr replace "${SUBNET_PREFIX}.$i/24" dev kx-eth0
    ip -n "$ns" link set kx-eth0 up
  done
  # Wait until every host reaches the bridge (ports come up asynchronously). No ping needed: a TCP
  # connect to a closed port of 10.77.0.254 is refused at once when the link works and times out
  # when it does not.
  local tries
  for ((i = 1; i <= count; i++)); do
    for ((tries = 0; tries < 50; tries++)); do
      reachable "kx-host$i" "${SUBNET_PREFIX}.254" && break
      sleep 0.1
    done
    ((tries < 50)) || die "kx-host$i cannot reach ${SUBNET_PREFIX}.254 over $BRIDGE"
  done
}

reachable() {
  local out
  out=$(ip netns exec "$1" timeout 1 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
  [[ $out == *"refused"* ]]
}

down() {
  local ns link
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^kx-host[0-9]+$' || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
  # Deleting a namespace deletes its veth end and with it the peer; sweep what is left anyway.
  for link in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^kx-h[0-9]+-br$' || true); do
    ip link del "$link" 2>/dev/null || true
  done
  if link_exists "$BRIDGE"; then ip link del "$BRIDGE"; fi
}

status() {
  ip netns list | grep -E '^kx-' || echo "(no kx- namespaces)"
  ip -br addr | grep -E '^kx-' || echo "(no kx- links in the root namespace)"
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^kx-host[0-9]+$' || true); do
    echo "== $ns"
    ip -n "$ns" -br addr
  done
}

hostfile() {
  local slots=${1:-1} ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^kx-host[0-9]+$' | sort -V || true); do
    echo "${SUBNET_PREFIX}.${ns#kx-host} slots=$slots"
  done
}

case ${1:-} in
  up) check_root; up "${2:-2}" ;;
  down) check_root; down ;;
  status) check_root; status ;;
  hostfile) check_root; hostfile "${2:-1}" ;;
  *) echo "usage: $0 up [N] | down | status | hostfile [SLOTS]" >&2; exit 2 ;;
esac
