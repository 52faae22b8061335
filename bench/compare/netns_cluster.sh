#!/usr/bin/env bash
# Emulated cluster for benchmarks: N network namespaces ("hosts") joined by a bridge that lives
# in its own namespace, each host's link shaped with tc tbf to RATE in both directions, and with
# DELAY every packet that crosses the bridge is held that long by rf_netdelay
# (tests/netns/netdelay.cc; this kernel has no netem), so host-to-host one-way delay is DELAY
# and RTT 2*DELAY. One emulator, in the bridge namespace (br_netfilter passes bridged frames
# through iptables); without br_netfilter, one per host at its egress instead (TCP then counts
# held packets against its small-queue budget, see docs/performance.md). Needs root (and
# iptables for DELAY). Nothing touches the root namespace's network except the veth pairs
# created in it and moved away at once.
#
#   netns_cluster.sh up N [RATE] [DELAY]  hosts ${P}0..${P}N-1 at 10.88.0.(1+i); RATE e.g. 1gbit
#                                  (none: unshaped), DELAY e.g. 0.5ms, 500us (none: no delay);
#                                  $BURST_BYTES sets tbf's bucket, $GSO_BYTES caps GSO packets
#                                  (and makes the bucket that plus 4 KiB)
#   netns_cluster.sh down          remove every namespace and veth with prefix ${P} (idempotent)
#   netns_cluster.sh exec I CMD... run CMD inside host I
#   netns_cluster.sh status        list this cluster's namespaces, qdiscs and delay emulators
#
# P is $RF_NETNS_PREFIX (default rfh). `up` first tears down what a previous run may have left,
# and tears down again if any step fails, so it never leaves a half-built cluster behind. The
# emulator exits with `down`, and also when $RF_NETNS_OWNER_PID (if set) exits; its log, with a
# stats line (delay achieved, drops) written at exit, is /run/rf_netdelay/${P}br.q0.log.
# rf_netdelay is found as scripts/netns_lib.sh says ($RF_NETDELAY, PATH, build/).
set -euo pipefail
P=${RF_NETNS_PREFIX:-rfh}
[[ $P =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "RF_NETNS_PREFIX must be 1-8 lowercase letters/digits" >&2; exit 2; }

usage() { sed -n '2,24p' "$0" >&2; exit 2; }

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

# tc-style time (500us, 0.5ms, 2ms, 1s; a bare number is microseconds) -> whole microseconds.
delay_us() {
  local d=${1,,} mult
  [[ $d =~ ^([0-9]+(\.[0-9]+)?)(us|usec|ms|msec|s|sec)?$ ]] \
    || { echo "unsupported delay '$1' (use e.g. 500us or 0.5ms)" >&2; return 1; }
  case ${BASH_REMATCH[3]} in
    ms|msec) mult=1000 ;;
    s|sec) mult=1000000 ;;
    *) mult=1 ;;
  esac
  awk -v n="${BASH_REMATCH[1]}" -v m="$mult" 'BEGIN { printf "%d\n", n * m + 0.5 }'
}

shape() {  # shape NS DEV RATE
  local ns=$1 dev=$2 rate=$3 bytes burst
  bytes=$(rate_bytes "$rate")
  # A small bucket (1 ms of traffic, at least 128 KiB for GSO segments) keeps short transfers
  # from running above RATE on the bucket's credit; tbf's hrtimer refills it fast enough.
  # GSO_BYTES caps the link's GSO packets so that the bucket can be one such packet: a link
  # closer to a NIC's, which serialises every byte (docs/performance.md, "A NIC-like link").
  if [[ -n ${GSO_BYTES:-} ]]; then
    ip -n "$ns" link set dev "$dev" gso_max_size "$GSO_BYTES"
    burst=${BURST_BYTES:-$(( GSO_BYTES + 4096 ))}
  else
    burst=$(( ${BURST_BYTES:-$(( bytes / 1000 ))} )); (( burst < 131072 )) && burst=131072
  fi
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
}

up() {
  local n=$1 rate=${2:-} delay=${3:-} us=0 i
  if ! [[ $n =~ ^[0-9]+$ ]] || (( n < 1 || n > 250 )); then echo "N must be 1..250" >&2; exit 2; fi
  [[ $rate != none ]] || rate=
  [[ $delay != none ]] || delay=
  if [[ -n $rate ]]; then rate_bytes "$rate" >/dev/null || exit 2; fi
  if [[ -n $delay ]]; then us=$(delay_us "$delay") || exit 2; fi
  down
  trap 'echo "netns_cluster: setup failed, tearing down" >&2; down' ERR
  netns_bridge "$P"
  for ((i = 0; i < n; i++)); do
    netns_host "$P" "$i" "$i" "10.88.0.$((1 + i))/24"
    if [[ -n "$rate" ]]; then
      shape "${P}$i" "${P}v$i" "$rate"     # host -> bridge (upload)
      shape "${P}br" "${P}p$i" "$rate"     # bridge -> host (download)
    fi
  done
  # Held in netfilter's POSTROUTING, before the bridge port's qdisc: delay, then rate.
  if (( us > 0 )); then
    if ip netns exec "${P}br" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null; then
      netns_delay "${P}br" "$us"
    else
      echo "netns_cluster: no br_netfilter; delaying at each host's egress instead" >&2
      for ((i = 0; i < n; i++)); do netns_delay "${P}$i" "$us"; done
    fi
  fi
  trap - ERR
}

status() {
  local ns
  for ns in $(netns_list "$P" "[0-9]+"); do
    echo "== $ns"; ip netns exec "$ns" tc qdisc show | grep -v "qdisc noqueue" || true
    if [[ -f $NETNS_DELAY_DIR/$ns.q0.pid ]]; then
      echo "rf_netdelay pid $(cat "$NETNS_DELAY_DIR/$ns.q0.pid"): $(ip netns exec "$ns" \
        iptables -w 5 -t mangle -S POSTROUTING 2>/dev/null | grep -c NFQUEUE) NFQUEUE rule(s)"
    fi
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
