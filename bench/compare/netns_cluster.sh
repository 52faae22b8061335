#!/usr/bin/env bash
# Emulated cluster for benchmarks: N network namespaces ("hosts") joined by a bridge that lives
# in its own namespace, each host's link shaped with tc to RATE in both directions (optional
# DELAY with netem). Needs root. Nothing touches the root namespace's network except the
# veth pairs created in it and moved away at once.
#
#   netns_cluster.sh up N [RATE e.g. 1gbit] [DELAY e.g. 0.1ms]  hosts ${P}0..${P}N-1 at 10.88.0.(1+i)
#   netns_cluster.sh down          remove every namespace and veth with prefix ${P} (idempotent)
#   netns_cluster.sh exec I CMD... run CMD inside host I
#   netns_cluster.sh status        list this cluster's namespaces and their qdiscs
#
# P is $RF_NETNS_PREFIX (default rfh). `up` first tears down what a previous run may have left,
# and tears down again if any step fails, so it never leaves a half-built cluster behind.
set -euo pipefail
P=${RF_NETNS_PREFIX:-rfh}
[[ $P =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "RF_NETNS_PREFIX must be 1-8 lowercase letters/digits" >&2; exit 2; }

usage() { sed -n '2,14p' "$0" >&2; exit 2; }

# shellcheck source=../../scripts/netns_lib.sh
source "$(dirname "$0")/../../scripts/netns_lib.sh"
down() { netns_down "$P" "[0-9]+"; }

# tc rate (e.g. 1gbit, 500mbit, 10gbit) -> bytes per second, for sizing the token bucket.
rate_bytes() {
  local r=${1,,} num unit
  num=${r%%[a-z]*}; unit=${r#"$num"}
  case "$unit" in
    gbit) echo $(( num * 125000000 )) ;;
    mbit) echo $(( num * 125000 )) ;;
    kbit) echo $(( num * 125 )) ;;
    bit|"") echo $(( num / 8 )) ;;
    *) echo "unsupported rate '$1' (use Nkbit, Nmbit or Ngbit)" >&2; return 1 ;;
  esac
}

shape() {  # shape NS DEV RATE DELAY
  local ns=$1 dev=$2 rate=$3 delay=$4 bytes burst
  bytes=$(rate_bytes "$rate")
  # A small bucket (1 ms of traffic, at least 128 KiB for GSO segments) keeps short transfers
  # from running above RATE on the bucket's credit; tbf's hrtimer refills it fast enough.
  burst=$(( ${BURST_BYTES:-$(( bytes / 1000 ))} )); (( burst < 131072 )) && burst=131072
  if [[ -n "$delay" ]]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$delay"
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1: handle 2: tbf rate "$rate" burst "$burst" latency 50ms
  else
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
  fi
}

up() {
  local n=$1 rate=${2:-} delay=${3:-} i
  [[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= 250 )) || { echo "N must be 1..250" >&2; exit 2; }
  down
  trap 'echo "netns_cluster: setup failed, tearing down" >&2; down' ERR
  netns_bridge "$P"
  for ((i = 0; i < n; i++)); do
    netns_host "$P" "$i" "$i" "10.88.0.$((1 + i))/24"
    if [[ -n "$rate" ]]; then
      shape "${P}$i" "${P}v$i" "$rate" "$delay"     # host -> bridge (upload)
      shape "${P}br" "${P}p$i" "$rate" "$delay"     # bridge -> host (download)
    fi
  done
  trap - ERR
}

status() {
  local ns
  for ns in $(netns_list "$P" "[0-9]+"); do
    echo "== $ns"; ip netns exec "$ns" tc qdisc show | grep -v "qdisc noqueue" || true
  done
}

[[ $# -ge 1 ]] || usage
op=$1; shift
case "$op" in
  up) [[ $# -ge 1 ]] || usage; up "$@" ;;
  down) down ;;
  exec) [[ $# -ge 2 ]] || usage; i=$1; shift; exec ip netns exec "${P}$i" "$@" ;;
  status) status ;;
  *) usage ;;
esac
