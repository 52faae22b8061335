#!/usr/bin/env bash
# Test of rf_netdelay's impairments (tests/netns/netdelay.cc: --loss, --duplicate, --reorder,
# --jitter-us, --seed) through scripts/netns_lib.sh's netns_impair, on a 2-host emulated
# cluster (namespaces rfi<pid>h1, rfi<pid>h2 and rfi<pid>br, 10.79.0.1-2). h1 sends 2,000
# numbered UDP datagrams to h2 (paced) through an emulator on h1; h2 counts what arrives:
#   1. --loss 0.05: between 1% and 15% of the datagrams missing (a wide bound, not a timing
#      one), exactly as many as the emulator says it dropped, none duplicated;
#   2. the same --seed again: exactly the same datagrams missing (the decisions reproduce);
#   3. --duplicate 0.1: between 1% and 30% arrive twice, none missing, and the emulator's
#      "duplicated" count equals the duplicates received; the same with the emulator in the
#      bridge namespace instead (br_netfilter; skipped without it);
#   4. --reorder 0.1 --reorder-us 20000: at least 1% arrive after a later one, none missing;
#   5. --delay-us 1000 --jitter-us 3000 alone: none out of order (jitter keeps order);
#   6. 16 MiB over TCP h1 -> h2 with 1% loss, 1% duplication, 1% reordering, 1 ms delay and
#      0.5 ms jitter from h1 and 1% loss and 1 ms delay on h2's ACKs arrives whole (sha256),
#      and h2 counted no checksum error (copies are valid packets) nor receive-buffer drop;
#   7. 4 MiB over TCP through --loss 0.001 alone: decided per wire packet, not per GSO packet.
#
#   netimpair_test.sh RF_NETDELAY_BINARY
#
# Needs root, network namespaces, iptables with the NFQUEUE target, python3; exits 77
# (skipped) without them. Tears the cluster down on any exit. About 15-20 s.
set -euo pipefail
bin=${1:?usage: netimpair_test.sh RF_NETDELAY_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../scripts/netns_lib.sh
source "$here/../../scripts/netns_lib.sh"
export RF_NETDELAY=$bin
export RF_NETNS_OWNER_PID=$$   # the emulators exit with this script, even on SIGKILL
P=rfi$(($$ % 100000))
A=10.79.0.1 B=10.79.0.2
NETNS_DELAY_DIR=$(mktemp -d)   # the emulators' logs and pid files, the test's files
dir=$NETNS_DELAY_DIR

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
cleanup() {
  netns_down "$P" "h[0-9]+"
  rm -rf -- "$dir"
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
       -m mark ! --mark "$NETNS_DUP_MARK" -j NFQUEUE --queue-num 9 --queue-bypass 2>/dev/null; then
  skip "iptables' NFQUEUE target or mark match is unavailable (xt_NFQUEUE, nfnetlink_queue)"
fi
ip netns exec "${P}h1" iptables -w 5 -t mangle -F POSTROUTING

# udp_run NAME: 2,000 numbered datagrams h1 -> h2 (bursts of 20, 1 ms apart), then 20 "end"
# markers (2000-2019) 5 ms apart; h2 writes NAME.counts ("missing" of the 2,000, "lost" of
# all 2,020, "duplicates" of all, ...) and NAME.missing (the missing numbers). The receiver stops
# 0.5 s after the last datagram once a marker came, at most after 20 s.
udp_run() {
  local name=$1 i
  rm -f "$dir/ready"
  timeout 25 ip netns exec "${P}h2" python3 -c '
import socket, sys, time
host, out, ready = sys.argv[1:4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE: no drops at the receiver
s.bind((host, 5401)); open(ready, "w").close()
count, seen, dups, late, top = 2000, set(), 0, 0, -1
markers = set()
s.settimeout(0.1); deadline = time.monotonic() + 20; ended = False; last = 0
while time.monotonic() < deadline and not (ended and time.monotonic() > last + 0.5):
    try: d = s.recv(64)
    except socket.timeout: continue
    last = time.monotonic()
    n = int(d.split(b" ")[0])
    if n >= count:
        ended = True; dups += n in markers; markers.add(n); continue
    if n in seen: dups += 1; continue
    seen.add(n)
    if n < top: late += 1
    top = max(top, n)
missing = [n for n in range(count) if n not in seen]
counts = {"received": len(seen), "missing": len(missing), "duplicates": dups,
          "out_of_order": late, "lost": len(missing) + 20 - len(markers)}
open(out + ".counts", "w").write("".join("%s %d\n" % kv for kv in counts.items()))
open(out + ".missing", "w").write(" ".join(map(str, missing)))' \
    "$B" "$dir/$name" "$dir/ready" &
  local receiver=$!
  for ((i = 0; i < 100; i++)); do [[ -e $dir/ready ]] && break; sleep 0.05; done
  [[ -e $dir/ready ]] || fail "the UDP receiver did not start"
  timeout 20 ip netns exec "${P}h1" python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for n in range(2000):
    s.sendto(b"%d padding" % n, (sys.argv[1], 5401))
    if n % 20 == 19: time.sleep(0.001)
for n in range(2000, 2020): s.sendto(b"%d end" % n, (sys.argv[1], 5401)); time.sleep(0.005)' "$B"
  wait "$receiver" || fail "the UDP receiver failed"
  echo "$name: $(tr '\n' ' ' <"$dir/$name.counts")"
}
# field NAME KEY: a count of udp_run NAME.
field() { awk -v k="$2" '$1 == k { print $2 }' "$dir/$1.counts"; }
# emu_stat NAME: a number from the --stats line of h1's emulator (stopped first).
emu_stat() {
  local line
  line=$(grep "rf_netdelay: stats" "$dir/${P}h1.q0.log") || fail "no stats line from h1's emulator"
  [[ $line =~ [\ ,]$1\ ([0-9]+) ]] || fail "no '$1' in: $line"
  echo "${BASH_REMATCH[1]}"
}
# snmp PROTO FIELD: a counter of h2's /proc/net/snmp (Tcp InCsumErrors, Udp RcvbufErrors, ...).
snmp() {
  ip netns exec "${P}h2" cat /proc/net/snmp | awk -v p="$1:" -v f="$2" \
    '$1 == p { if (!n) { for (i = 2; i <= NF; i++) if ($i == f) c = i; n = 1 } else print $c }'
}
impair_h1() { netns_impair "${P}h1" 0 "$@"; }
stop_h1() {  # and every verdict it gave was taken
  netns_delay_stop "${P}h1"
  grep "rf_netdelay: stats" "$dir/${P}h1.q0.log" || true
  (($(emu_stat verdict_errors) == 0)) || fail "the kernel refused verdicts of h1's emulator"
}

# 1. loss
impair_h1 --loss 0.05 --seed 7
udp_run loss
stop_h1
missing=$(field loss missing) lost=$(emu_stat lost)
((missing >= 20 && missing <= 300)) || fail "--loss 0.05: $missing of 2000 missing, not 1%-15%"
((lost == $(field loss lost))) || fail "--loss 0.05: emulator lost $lost, h2 $(field loss lost)"
(($(field loss duplicates) == 0)) || fail "--loss alone duplicated datagrams"

# 2. the same seed, the same datagrams lost
impair_h1 --loss 0.05 --seed 7
udp_run loss_again
stop_h1
cmp -s "$dir/loss.missing" "$dir/loss_again.missing" \
  || fail "--seed 7 twice lost different datagrams:" \
          "$(cat "$dir/loss.missing") / $(cat "$dir/loss_again.missing")"

# 3. duplication
impair_h1 --duplicate 0.1 --seed 3
udp_run dup
stop_h1
dups=$(field dup duplicates)
((dups >= 20 && dups <= 600)) || fail "--duplicate 0.1: $dups of 2000 arrived twice, not 1%-30%"
(($(field dup missing) == 0)) || fail "--duplicate alone lost datagrams"
(($(emu_stat duplicated) == dups)) || fail "h1 duplicated $(emu_stat duplicated), h2 saw $dups"
(($(emu_stat dup_failed) == 0)) || fail "copies failed to send"

# 3b. duplication at the bridge (frames on the port, to the MAC the bridge learned there)
if ip netns exec "${P}br" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null; then
  netns_impair "${P}br" 0 --duplicate 0.1 --seed 3
  udp_run dup_bridge
  netns_delay_stop "${P}br"
  line=$(grep "rf_netdelay: stats" "$dir/${P}br.q0.log") || fail "no stats from the bridge emulator"
  echo "$line"
  dups=$(field dup_bridge duplicates)
  ((dups >= 20 && dups <= 600)) || fail "--duplicate 0.1 at the bridge: $dups of 2000 arrived twice"
  (($(field dup_bridge missing) == 0)) || fail "--duplicate alone at the bridge lost datagrams"
  if ! [[ $line =~ duplicated\ ([0-9]+) ]] || ((BASH_REMATCH[1] != dups)); then
    fail "the bridge emulator's duplicated count is not the $dups received"
  fi
  ip netns exec "${P}br" sysctl -qw net.bridge.bridge-nf-call-iptables=0
else
  echo "no br_netfilter: duplication at the bridge not tested"
fi

# 4. reordering
impair_h1 --reorder 0.1 --reorder-us 20000 --seed 5
udp_run reorder
stop_h1
late=$(field reorder out_of_order)
((late >= 20)) || fail "--reorder 0.1: $late of 2000 arrived out of order, fewer than 1%"
(($(field reorder missing) == 0)) || fail "--reorder alone lost datagrams"
(($(emu_stat reordered) > 0)) || fail "the emulator counted no reordered packets"

# 5. jitter keeps order
impair_h1 --delay-us 1000 --jitter-us 3000 --seed 11
udp_run jitter
stop_h1
(($(field jitter out_of_order) == 0)) || fail "--jitter-us alone reordered datagrams"
(($(field jitter missing) == 0)) || fail "--jitter-us alone lost datagrams"

# 6. 16 MiB over TCP through everything at once; both ends hash what they saw.
impair_h1 --loss 0.01 --duplicate 0.01 --reorder 0.01 --delay-us 1000 --jitter-us 500 --seed 13
netns_impair "${P}h2" 0 --loss 0.01 --delay-us 1000 --seed 17
timeout 90 ip netns exec "${P}h2" python3 -c '
import hashlib, socket, sys
s = socket.create_server((sys.argv[1], 5402)); s.settimeout(60)
c, _ = s.accept(); c.settimeout(60); h = hashlib.sha256(); n = 0
while (d := c.recv(1 << 20)): h.update(d); n += len(d)
print(n, h.hexdigest())' "$B" >"$dir/received" &
server=$!
sent=$(timeout 90 ip netns exec "${P}h1" python3 -c '
import hashlib, os, socket, sys, time
data = os.urandom(16 << 20)
for _ in range(100):
    try: c = socket.create_connection((sys.argv[1], 5402), timeout=5); break
    except OSError: time.sleep(0.05)
c.settimeout(60); t = time.monotonic(); c.sendall(data); c.shutdown(socket.SHUT_WR); c.recv(1)
print(len(data), hashlib.sha256(data).hexdigest())
rate = len(data) * 8 / (time.monotonic() - t) / 1e6
print("16 MiB impaired: %.1f Mbit/s" % rate, file=sys.stderr)' "$B")
wait "$server" || fail "the receiving end failed"
received=$(cat "$dir/received")
echo "16 MiB: sent $sent, received $received"
stop_h1
netns_delay_stop "${P}h2"
grep "rf_netdelay: stats" "$dir/${P}h2.q0.log" || true
[[ -n $sent && $sent == "$received" ]] || fail "16 MiB through the impairments is not intact"
# The copies are valid packets (a bad checksum would be dropped unseen), and no datagram was
# dropped by h2's socket (the counts above compare the emulator's decisions with arrivals).
for c in "Tcp InCsumErrors" "Udp InCsumErrors" "Udp RcvbufErrors" "Udp InErrors"; do
  # shellcheck disable=SC2086  # PROTO FIELD
  (($(snmp $c) == 0)) || fail "h2's $c is $(snmp $c)"
done
(($(emu_stat lost) > 0 && $(emu_stat duplicated) > 0 && $(emu_stat held_back) > 0)) \
  || fail "the TCP transfer met no loss, duplicate or held-back packet: not tested"

# 7. --loss alone decides per wire packet too: 4 MiB over TCP is 2,897 segments of 1448 bytes
#    (not ~70 GSO packets of 64 KiB).
impair_h1 --loss 0.001 --seed 19
timeout 60 ip netns exec "${P}h2" python3 -c '
import socket, sys
s = socket.create_server((sys.argv[1], 5403)); s.settimeout(30)
c, _ = s.accept(); c.settimeout(30)
while c.recv(1 << 20): pass' "$B" &
server=$!
timeout 60 ip netns exec "${P}h1" python3 -c '
import socket, sys, time
for _ in range(100):
    try: c = socket.create_connection((sys.argv[1], 5403), timeout=5); break
    except OSError: time.sleep(0.05)
c.settimeout(30); c.sendall(bytes(4 << 20)); c.shutdown(socket.SHUT_WR); c.recv(1)' "$B"
wait "$server" || fail "the receiving end failed"
stop_h1
(($(emu_stat released) >= 2800)) || fail "--loss: h1's emulator saw GSO packets, not wire packets"
echo "PASS"
