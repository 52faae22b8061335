#!/usr/bin/env bash
# Test of rf_netdelay (tests/netns/netdelay.cc) through scripts/netns_lib.sh's netns_delay, on
# a 2-host emulated cluster (namespaces rfd<pid>h1, rfd<pid>h2 and rfd<pid>br, 10.86.0.1-2):
#   1. RTT h1 -> h2 (ping -c 20 -i 0.05, or a TCP echo where ping is absent) without delay, then
#      with 2 ms one way on both hosts: the smallest delayed RTT must exceed the smallest
#      undelayed one by at least 4 ms (a lower bound: an emulator that adds nothing fails);
#   2. 16 MiB over TCP h1 -> h2 with the delay on arrives whole (sha256 of both ends);
#   3. each emulator's --stats line: packets released, none dropped; the same RTT bound with
#      the 2 ms applied once at the bridge instead (netns_cluster.sh's placement);
#   4. fail-open: emulators killed with SIGKILL, the NFQUEUE rules left in place, h1 and h2
#      still talk, undelayed (the rules' --queue-bypass);
#   5. --limit 4 with ~10 packets in flight: drops, counted and reported on stderr;
#   6. an emulator exits by itself when its namespace is deleted, and when --parent-pid exits.
#
#   netdelay_test.sh RF_NETDELAY_BINARY
#
# NETDELAY_TEST_RTT=tcp measures RTT with the TCP echo even where ping exists.
# Needs root, network namespaces, iptables with the NFQUEUE target, python3; exits 77
# (skipped) without them. Tears the cluster down on any exit. About 10 s.
set -euo pipefail
bin=${1:?usage: netdelay_test.sh RF_NETDELAY_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../scripts/netns_lib.sh
source "$here/../../scripts/netns_lib.sh"
export RF_NETDELAY=$bin
unset RF_NETNS_OWNER_PID
P=rfd$(($$ % 100000))
A=10.86.0.1 B=10.86.0.2
NETNS_DELAY_DIR=$(mktemp -d)   # the emulators' logs and pid files

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
cleanup() {
  netns_down "$P" "h[0-9]+"
  rm -rf -- "$NETNS_DELAY_DIR"
}
trap cleanup EXIT

[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, iptables)"
command -v ip >/dev/null || skip "iproute2 (ip) not found"
command -v iptables >/dev/null || skip "iptables not found (apt-get install iptables)"
command -v python3 >/dev/null || skip "python3 not found"
[[ -x $bin ]] || fail "$bin is not an executable"
ip netns add "${P}h9" 2>/dev/null || skip "cannot create network namespaces"
ip netns del "${P}h9"
netns_bridge "$P"
netns_host "$P" h1 1 "$A/24"
netns_host "$P" h2 2 "$B/24"
if ! ip netns exec "${P}h1" iptables -w 5 -t mangle -A POSTROUTING -o lo \
       -j NFQUEUE --queue-num 9 --queue-bypass 2>/dev/null; then
  skip "iptables' NFQUEUE target is unavailable (kernel without xt_NFQUEUE/nfnetlink_queue)"
fi
ip netns exec "${P}h1" iptables -w 5 -t mangle -F POSTROUTING

# RTT samples h1 -> h2 in milliseconds, one per line: ping, else a TCP echo of 20 small messages.
rtts() {
  if [[ ${NETDELAY_TEST_RTT:-ping} == ping ]] && command -v ping >/dev/null; then
    timeout 20 ip netns exec "${P}h1" ping -n -c 20 -i 0.05 -W 2 "$B" \
      | sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' || true   # lost replies: counted by the caller
    return
  fi
  timeout 20 ip netns exec "${P}h2" python3 -c '
import socket, sys
s = socket.create_server((sys.argv[1], 5302)); s.settimeout(15)
c, _ = s.accept(); c.settimeout(15)
while (d := c.recv(64)): c.sendall(d)' "$B" &
  local server=$!
  timeout 20 ip netns exec "${P}h1" python3 -c '
import socket, sys, time
for _ in range(100):
    try: c = socket.create_connection((sys.argv[1], 5302), timeout=5); break
    except OSError: time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(20):
    t = time.monotonic(); c.sendall(b"x"); c.recv(64)
    print("%.3f" % ((time.monotonic() - t) * 1000)); time.sleep(0.05)' "$B"
  wait "$server" || true
}
stat_of() { sort -n | awk -v q="$1" '{v[NR] = $1} END {
  if (NR == 0) exit 1; i = int(q * (NR - 1)) + 1; print v[i] }'; }

base=$(rtts)
[[ $(wc -l <<<"$base") -ge 15 ]] || fail "RTT without delay: too few replies: $base"
base_min=$(stat_of 0 <<<"$base") base_med=$(stat_of 0.5 <<<"$base")
echo "RTT without delay: min $base_min ms, median $base_med ms"

netns_delay "${P}h1" 2000
netns_delay "${P}h2" 2000
delayed=$(rtts)
[[ $(wc -l <<<"$delayed") -ge 15 ]] || fail "RTT with delay: too few replies: $delayed"
del_min=$(stat_of 0 <<<"$delayed") del_med=$(stat_of 0.5 <<<"$delayed")
echo "RTT with 2 ms each way: min $del_min ms, median $del_med ms"
awk -v d="$del_min" -v b="$base_min" 'BEGIN { exit !(d >= b + 4.0) }' \
  || fail "delayed RTT min $del_min ms is not 4 ms above the undelayed min $base_min ms"

# 16 MiB h1 -> h2 through the delay; both ends hash what they saw.
timeout 60 ip netns exec "${P}h2" python3 -c '
import hashlib, socket, sys
s = socket.create_server((sys.argv[1], 5301)); s.settimeout(30)
c, _ = s.accept(); c.settimeout(30); h = hashlib.sha256(); n = 0
while (d := c.recv(1 << 20)): h.update(d); n += len(d)
print(n, h.hexdigest())' "$B" >"$NETNS_DELAY_DIR/received" &
server=$!
sent=$(timeout 60 ip netns exec "${P}h1" python3 -c '
import hashlib, os, socket, sys, time
data = os.urandom(16 << 20)
for _ in range(100):
    try: c = socket.create_connection((sys.argv[1], 5301), timeout=5); break
    except OSError: time.sleep(0.05)
c.settimeout(30); t = time.monotonic(); c.sendall(data); c.shutdown(socket.SHUT_WR); c.recv(1)
print(len(data), hashlib.sha256(data).hexdigest())
print("16 MiB sent at %.0f Mbit/s" % (len(data) * 8 / (time.monotonic() - t) / 1e6), file=sys.stderr)' "$B")
wait "$server" || fail "the receiving end failed"
received=$(cat "$NETNS_DELAY_DIR/received")
echo "16 MiB: sent $sent, received $received"
[[ -n $sent && $sent == "$received" ]] || fail "16 MiB transfer through the delay is not intact"

netns_delay_stop "${P}h1"
netns_delay_stop "${P}h2"
for h in h1 h2; do
  line=$(grep "stats" "$NETNS_DELAY_DIR/${P}$h.q0.log") || fail "no stats line from $h's emulator"
  echo "$h: $line"
  if ! [[ $line =~ released\ ([0-9]+)\ packets ]] || (( BASH_REMATCH[1] < 40 )); then
    fail "$h's emulator released too few packets"
  fi
  [[ $line == *"dropped 0 "* ]] || fail "$h's emulator dropped packets"
done

# The same 2 ms at the bridge instead (one emulator for both directions; br_netfilter).
if ip netns exec "${P}br" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null; then
  netns_delay "${P}br" 2000
  bridged=$(rtts)
  [[ $(wc -l <<<"$bridged") -ge 15 ]] || fail "RTT with delay at the bridge: too few replies"
  br_min=$(stat_of 0 <<<"$bridged")
  echo "RTT with 2 ms at the bridge: min $br_min ms, median $(stat_of 0.5 <<<"$bridged") ms"
  awk -v d="$br_min" -v b="$base_min" 'BEGIN { exit !(d >= b + 4.0) }' \
    || fail "bridge-delayed RTT min $br_min ms is not 4 ms above the undelayed min $base_min ms"
  netns_delay_stop "${P}br"
  grep -q "dropped 0 " "$NETNS_DELAY_DIR/${P}br.q0.log" || fail "bridge emulator: no clean stats"
else
  echo "no br_netfilter: delay at the bridge not tested"
fi

# Fail-open: emulators killed outright, rules still in place.
netns_delay "${P}h1" 2000
netns_delay "${P}h2" 2000
for h in h1 h2; do kill -KILL "$(cat "$NETNS_DELAY_DIR/${P}$h.q0.pid")"; done
sleep 0.2
ip netns exec "${P}h1" iptables -w 5 -t mangle -S POSTROUTING | grep -q NFQUEUE \
  || fail "the NFQUEUE rule disappeared; fail-open not tested"
after=$(rtts)
[[ $(wc -l <<<"$after") -ge 15 ]] || fail "hosts cannot talk once the emulators are killed"
after_min=$(stat_of 0 <<<"$after")
echo "RTT with the emulators killed (fail-open): min $after_min ms"
awk -v a="$after_min" 'BEGIN { exit !(a < 4.0) }' || fail "still delayed after the emulators died"

# The bound: at most 4 packets held (100 ms each), 30 pings 10 ms apart: the rest dropped, counted.
ip netns exec "${P}h1" "$bin" --delay-us 100000 --limit 4 --daemon --stats \
  --pid-file "$NETNS_DELAY_DIR/limit.pid" 2>"$NETNS_DELAY_DIR/limit.log"
timeout 20 ip netns exec "${P}h1" ping -n -c 30 -i 0.01 -W 1 -q "$B" >/dev/null || true
pid=$(cat "$NETNS_DELAY_DIR/limit.pid")
kill -TERM "$pid"
for ((i = 0; i < 60; i++)); do netns_pid_running "$pid" || break; sleep 0.05; done
line=$(grep stats "$NETNS_DELAY_DIR/limit.log") || fail "no stats from the --limit emulator"
echo "limit 4: $line"
if ! [[ $line =~ dropped\ ([0-9]+)\ \(limit\ 4\) ]] || (( BASH_REMATCH[1] < 1 )); then
  fail "a 4-packet limit with ~10 packets in flight dropped nothing"
fi
grep -q "packets held (--limit), dropped 1" "$NETNS_DELAY_DIR/limit.log" || fail "drops not reported"

# The emulator's own exits: namespace deleted; --parent-pid gone.
exits_within() {  # PID: exits within 3 s
  local i
  for ((i = 0; i < 60; i++)); do netns_pid_running "$1" || return 0; sleep 0.05; done
  return 1
}
ip netns add "${P}h3"
netns_delay "${P}h3" 1000
pid=$(cat "$NETNS_DELAY_DIR/${P}h3.q0.pid")
ip netns del "${P}h3"
exits_within "$pid" || { kill -KILL "$pid"; fail "emulator outlived its namespace"; }
grep -q "exit: namespace deleted" "$NETNS_DELAY_DIR/${P}h3.q0.log" || fail "no exit reason logged"
sleep 30 &
owner=$!
RF_NETNS_OWNER_PID=$owner netns_delay "${P}h1" 1000 1
pid=$(cat "$NETNS_DELAY_DIR/${P}h1.q1.pid")
kill "$owner"
exits_within "$pid" || fail "emulator outlived its --parent-pid"
grep -q "exit: parent exited" "$NETNS_DELAY_DIR/${P}h1.q1.log" || fail "no exit reason logged"
echo "PASS"
