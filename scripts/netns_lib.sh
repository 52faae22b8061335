# shellcheck shell=bash
# Emulated hosts on one machine, for the netns tests (tests/netns/cluster.sh) and the shaped-link
# benchmark (bench/compare/netns_cluster.sh). Source it; needs root.
#
# A cluster is network namespaces named PREFIX + <host name>, each with one veth whose other end
# sits on bridge br0 in namespace PREFIX + "br". Veths are named PREFIX + v<i> (host end) and
# PREFIX + p<i> (bridge end); they are created in the root namespace and moved away at once, so
# nothing else in the root namespace's network changes.
#
#   netns_bridge PREFIX                     create PREFIX"br" with br0 up
#   netns_host PREFIX NAME I CIDR [IFNAME]  create host PREFIX+NAME on the bridge, its veth
#                                           PREFIX"v"I (renamed IFNAME if given) at CIDR
#   netns_down PREFIX HOST_RE               kill every process in PREFIX+HOST_RE and PREFIX"br",
#                                           delete them and stray veths (idempotent)
#   netns_list PREFIX HOST_RE               the cluster's namespaces, one per line
#   netns_impair NS QUEUE [OPTION...]       impair every IPv4 packet NS sends (but on lo), or
#                                           bridges (a bridge namespace, with br_netfilter):
#                                           rf_netdelay with OPTIONs (--delay-us US, --jitter-us
#                                           J, --loss F, --duplicate F, --reorder F, --reorder-us
#                                           R, --seed S, --limit N: rf_netdelay --help), detached,
#                                           on NFQUEUE QUEUE of NS, and an iptables rule (mangle
#                                           POSTROUTING, packets marked $NETNS_DUP_MARK excepted:
#                                           --duplicate's copies; --queue-bypass: a dead emulator
#                                           lets packets through). SCHED_FIFO 10, so busy CPUs do
#                                           not stretch the delay. Log (its --stats line at exit)
#                                           and pid file: $NETNS_DELAY_DIR/NS.qQUEUE.{log,pid}
#                                           ($NETNS_DELAY_DIR: default /run/rf_netdelay). On a
#                                           host, held packets still count against the sender's
#                                           TCP small-queue budget (a flow's bytes in flight are
#                                           capped near 1 ms of its rate); at the bridge they do
#                                           not (veth has orphaned them): prefer the bridge for
#                                           delay. One emulator per namespace: the first rule
#                                           takes every packet
#   netns_delay NS DELAY_US [QUEUE]         netns_impair NS QUEUE (default 0) --delay-us DELAY_US
#   netns_delay_stop NS                     remove NS's rules, SIGTERM its emulators and wait
#                                           (1 s) for them to print their stats and exit (held
#                                           packets leave at once); netns_down does it too
#
# rf_netdelay is $RF_NETDELAY, else rf_netdelay on PATH, else build/tests/netns/rf_netdelay of
# this repository. With $RF_NETNS_OWNER_PID set, emulators also exit when that process exits
# (a benchmark killed with SIGKILL leaves no emulator behind). This kernel has no netem and no
# nftables `queue` statement (CONFIG_NFT_QUEUE), hence iptables' NFQUEUE target (xt, through
# nft_compat or legacy); see docs/performance.md, "Emulated links: rate and delay".

netns_list() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1($2|br)\$" || true
}

NETNS_DELAY_DIR=${NETNS_DELAY_DIR:-/run/rf_netdelay}

netns_down() {
  local p=$1 re=$2 ns pid link
  for ns in $(netns_list "$p" "$re"); do
    netns_delay_stop "$ns"
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  # Veth ends still in the root namespace (a failed setup between create and move).
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${p}[vp][0-9]+\$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
}

netns_bridge() {
  local p=$1
  ip netns add "${p}br"
  ip -n "${p}br" link add br0 type bridge
  ip -n "${p}br" link set br0 up
  ip -n "${p}br" link set lo up
}

netns_host() {
  local p=$1 ns=$1$2 i=$3 cidr=$4 dev=${5:-$1v$3}
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "${p}v$i" type veth peer name "${p}p$i"
  ip link set "${p}v$i" netns "$ns"
  ip link set "${p}p$i" netns "${p}br"
  [[ $dev == "${p}v$i" ]] || ip -n "$ns" link set "${p}v$i" name "$dev"
  ip -n "${p}br" link set "${p}p$i" master br0
  ip -n "${p}br" link set "${p}p$i" up
  ip -n "$ns" addr add "$cidr" dev "$dev"
  ip -n "$ns" link set "$dev" up
}

netns_delay_bin() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [[ -n ${RF_NETDELAY:-} ]]; then echo "$RF_NETDELAY"
  elif command -v rf_netdelay >/dev/null; then command -v rf_netdelay
  elif [[ -x $here/build/tests/netns/rf_netdelay ]]; then echo "$here/build/tests/netns/rf_netdelay"
  else
    echo "netns_delay: rf_netdelay not found: build it (cmake --build build --target rf_netdelay)" \
         "or set RF_NETDELAY" >&2
    return 1
  fi
}

# The SO_MARK of --duplicate's copies, which the queue rules exclude.
NETNS_DUP_MARK=${NETNS_DUP_MARK:-0x52460001}

# netns_impair_rule NS -A|-D QUEUE: add or delete the rule that sends NS's packets to QUEUE.
netns_impair_rule() {
  ip netns exec "$1" iptables -w 5 -t mangle "$2" POSTROUTING ! -o lo \
    -m mark ! --mark "$NETNS_DUP_MARK" -j NFQUEUE --queue-num "$3" --queue-bypass
}

netns_impair() {
  local ns=${1:?netns_impair NS QUEUE [OPTION...]} q=${2:?netns_impair NS QUEUE [OPTION...]}
  local bin log pidf
  shift 2
  [[ $q =~ ^[0-9]+$ ]] || { echo "netns_impair: QUEUE is an integer, not '$q'" >&2; return 2; }
  bin=$(netns_delay_bin) || return 1
  if ! command -v iptables >/dev/null; then
    echo "netns_impair: iptables not found (apt-get install iptables)" >&2; return 1
  fi
  mkdir -p "$NETNS_DELAY_DIR"
  log=$NETNS_DELAY_DIR/$ns.q$q.log pidf=$NETNS_DELAY_DIR/$ns.q$q.pid
  # Bound before the rule exists (--daemon returns once the queue is bound), so no packet
  # meets a rule without its emulator except through the bypass.
  if ! ip netns exec "$ns" "$bin" "$@" --queue "$q" --dup-mark "$NETNS_DUP_MARK" --netns "$ns" \
         --rt-priority 10 --daemon --stats \
         --pid-file "$pidf" ${RF_NETNS_OWNER_PID:+--parent-pid "$RF_NETNS_OWNER_PID"} \
         </dev/null >"$log" 2>&1; then
    echo "netns_impair: rf_netdelay failed in $ns:" >&2; cat "$log" >&2; return 1
  fi
  netns_impair_rule "$ns" -A "$q"
}

netns_delay() {
  local ns=$1 us=$2 q=${3:-0}
  if ! [[ $us =~ ^[0-9]+$ && $q =~ ^[0-9]+$ ]]; then
    echo "netns_delay: DELAY_US and QUEUE are integers" >&2; return 2
  fi
  netns_impair "$ns" "$q" --delay-us "$us"
}

netns_delay_stop() {
  local ns=$1 f q pid pids=() i alive
  for f in "$NETNS_DELAY_DIR/$ns".q*.pid; do
    [[ -f $f ]] || continue
    q=${f##*.q} q=${q%.pid}
    netns_impair_rule "$ns" -D "$q" 2>/dev/null || true
    pid=$(cat "$f" 2>/dev/null || true)
    # Only a process that is still in this namespace (a stale file may name a reused pid).
    if [[ $pid =~ ^[0-9]+$ ]] && ip netns pids "$ns" 2>/dev/null | grep -qx "$pid"; then
      kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    fi
    rm -f "$f"
  done
  for ((i = 0; i < 20; i++)); do   # up to 1 s; then netns_down's SIGKILL
    alive=0
    for pid in "${pids[@]}"; do netns_pid_running "$pid" && alive=1; done
    ((alive)) || break
    sleep 0.05
  done
}

# True while PID runs (a zombie has exited; reaping it is its reaper's business, maybe not ours).
netns_pid_running() {
  [[ -e /proc/$1 && $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}
